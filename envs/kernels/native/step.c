/* One training step of the trading env for a batch of envs, fused per env (see envs/kernels/native.py).

   Why by hand: the step is a few dependent passes over each env's (A,) row (size the orders, scale
   the buys, mark), then a copy of the observation row. torch (eager or inductor) runs each pass over
   the whole (N, A) batch, so every pass streams the batch through the cache again and pays its own
   loop and thread start; here one thread takes an env's rows through every pass while they sit in L1
   and writes its observation row right after. Semantics are envs/core.py's step_core followed by
   envs/observation.py's build_obs: float32 per-asset quantities, float64 accounting, every per-asset sum feeding the
   accounting accumulated in float64. Sums run in another order than torch's (an OpenMP simd
   reduction), so results equal eager to float rounding, as torch.compile's do.

   Compiled without fast-math: IEEE semantics, NaN propagation as in torch (fmax/fmin are not used
   where torch's clamp/maximum would propagate a NaN). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define TINY 1e-12
#define SHARPE_VAR_EPS 1e-12

/* Parameters, in this order, as doubles (envs/kernels/native.py packs them). */
enum {
    P_INITIAL_CASH,
    P_BUY_RATE,          /* fee per $ of a buy's notional */
    P_SLIP,
    P_MAX_SHARES,
    P_DRAWDOWN_PENALTY,
    P_REWARD_SCALE,
    P_SHARPE_ETA,
    P_BUST_FRAC,
    P_MAX_WEIGHT,
    P_TURNOVER_PENALTY,
    P_HALF,              /* (unused: the execution table carries slippage + half-spread per bar and asset) */
    P_IMPACT_COEF,       /* execution: square-root impact coefficient */
    P_MIN_NOTIONAL,      /* execution: orders under this many $ are not placed */
    P_MEMORY,            /* execution: share of the worked order's size remembered at the next decision */
    P_ROUND_FEES,        /* 1: each sell's fees rounded up to the cent per asset (envs/fees.py), 0: not */
    P_COUNT
};

enum { MODE_WEIGHTS = 0, MODE_SHARES = 1 };
/* Fill modes, envs/tradability.py: HOLD skips the order (the position stays), EXIT sells everything. */
enum { FILL_HOLD = 0, FILL_TRADE = 1, FILL_EXIT = 2 };
enum { REWARD_LOG_RETURN = 0, REWARD_RETURN = 1, REWARD_DIFF_SHARPE = 2 };

/* The execution passes compute each asset's terms in a vectorized loop over a chunk of this many
   assets, then add them up in asset order in a plain loop: the float64 sums do not depend on the
   vector width or on the rows' alignment. */
#define SUM_CHUNK 128

#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 4
#endif

static inline void prefetch_row(const void *row, int64_t bytes)
{
    const char *p = (const char *)row;
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

/* torch's clamp(min=lo), maximum and minimum: a NaN operand gives NaN. */
static inline double clamp_min_d(double x, double lo) { return (x != x) ? x : (x < lo ? lo : x); }
static inline float clamp_min_f(float x, float lo) { return (x != x) ? x : (x < lo ? lo : x); }
static inline double maximum_d(double x, double y) { return (x != x || y != y) ? NAN : (x > y ? x : y); }
static inline float minimum_f(float x, float y) { return (x != x || y != y) ? NAN : (x < y ? x : y); }

/* envs/fees.py's round_up_cents (the same operations): a fee in $ rounded up to the cent, an amount a
   hair over a whole cent (CENT_SLACK of a cent, a rate's binary rounding) kept at it. */
#define CENT_SLACK 1e-6
static inline double ceil_cent(double fee)
{
    const double c = ceil(fee * 100.0 - CENT_SLACK);
    return (c < 0.0 ? 0.0 : c) / 100.0;
}

/* One asset's sell fees (envs/fees.py's sell_fees): the per-share fee min(q * per_share, cap) and,
   rounding, the rate on the proceeds, each rounded up to the cent; not rounding, the per-share fee only
   (the caller prices the proceeds' sum). */
static inline double sell_fee(double proceeds, float q, double sec, double per_share, double cap, int rnd)
{
    const double x = (double)q * per_share;
    const double share_fee = x < cap ? x : cap;
    return rnd ? ceil_cent(proceeds * sec) + ceil_cent(share_fee) : share_fee;
}

/* How an env's orders are sized (order_diff's `kind`): weights without a cap or an untradable bar, weights
   with either, shares. */
enum { ORDERS_WEIGHTS = 0, ORDERS_WEIGHTS_LIMITED = 1, ORDERS_SHARES = 2 };

/* Asset j's order in shares (+ buy, - sell) before execution, envs/core.py's _orders. Weights: its
   target weight (at most max_w; none for an untradable asset, fm) of `budget`, less the holding (HOLD:
   none); shares: the action times max_shares, rounded (EXIT sells all, HOLD nothing; sells not yet
   limited to holdings), buys cut to the cap on post-trade holdings, floor(cap_value / open) shares. */
static inline __attribute__((always_inline)) float order_diff(
    int kind, int capped, int64_t j, const float *a, const float *sh, const float *po, const uint8_t *fm,
    float budget, float max_w, float max_shares, float cap_value)
{
    if (kind == ORDERS_WEIGHTS) return clamp_min_f(a[j], 0.0f) * budget / po[j] - sh[j];
    if (kind == ORDERS_WEIGHTS_LIMITED) {
        /* (a plain min: a NaN action makes the step fail anyway, see `bad`) */
        const float a0 = clamp_min_f(a[j], 0.0f);
        const float w = (a0 < max_w ? a0 : max_w) * (fm[j] == FILL_TRADE ? 1.0f : 0.0f);
        return fm[j] == FILL_HOLD ? 0.0f : w * budget / po[j] - sh[j];
    }
    const float x = a[j] < -1.0f ? -1.0f : (a[j] > 1.0f ? 1.0f : a[j]);
    const int m = fm ? fm[j] : FILL_TRADE;
    float diff = m == FILL_TRADE ? rintf(x * max_shares) : (m == FILL_EXIT ? -sh[j] : 0.0f);
    if (capped) {
        const float room = clamp_min_f(floorf(cap_value / po[j]) - sh[j], 0.0f);
        const float buy = minimum_f(clamp_min_f(diff, 0.0f), room);
        diff = diff > 0.0f ? buy : diff;
    }
    return diff;
}

/* The execution passes' element loops are compiled without trapping math (GCC; other compilers
   ignore the pragma): with it GCC will not if-convert the selects, so the loops would run one asset
   at a time (the whole step measured ~1.9x slower that way, docs/benchmarks.md). It changes no value
   (no FP exception is ever read); what it would change, the order of an `omp simd` reduction (see
   BASE_FLAGS in envs/kernels/native.py), is not used in here: each pass computes its per-asset terms
   in a vectorized loop and adds them up in asset order in a plain loop (SUM_CHUNK). */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#define ELEMENT_LOOPS __attribute__((noinline))

/* Select-only forms of clamp_min_f(x, 0) and minimum_f for the element loops below (the same values,
   NaN included): every comparison is evaluated unconditionally, none sits in one arm of a select. */
static inline float clamp0_sel(float x) { return x < 0.0f ? 0.0f : x; }
static inline float minimum_sel(float x, float y)
{
    const int nan = (x != x) | (y != y);
    const float m = x < y ? x : y;
    return nan ? NAN : m;
}

/* envs/execution.py's frac(q; m): slippage + half-spread + the square-root impact of growing the
   order worked so far from m to m + q shares, per share, at most 1 (order_growth's form and order of
   operations). */
static inline float fill_frac(float q, float m, float impact, float coef, float half)
{
    const float total = m + q;
    const float num = q * q + 3.0f * m * total;
    const float den = total * sqrtf(total) + m * sqrtf(m);
    const float g = num / (den < 1e-30f ? 1e-30f : den);
    const float f = g * impact * coef + half;
    return f > 1.0f ? 1.0f : f;
}

/* envs/execution.py's carried_order (the decayed order's shares on `side`'s side) and worked_order. */
static inline float carried_order(float remembered, float side)
{
    const float bought = clamp0_sel(remembered), sold = clamp0_sel(-remembered);
    return side > 0.0f ? bought : sold;
}
static inline float worked_order(float remembered, float traded)
{
    const float bought = clamp0_sel(remembered), sold = remembered > 0.0f ? 0.0f : remembered;
    const float same = traded > 0.0f ? bought : sold;
    const float grown = same + traded;
    return traded == 0.0f ? remembered : grown;
}

/* order_diff in select-only code (the same values), for the element loops. */
static inline __attribute__((always_inline)) float order_diff_sel(
    int kind, int capped, int64_t j, const float *a, const float *sh, const float *po, const uint8_t *fm,
    float budget, float max_w, float max_shares, float cap_value)
{
    if (kind == ORDERS_WEIGHTS) return clamp0_sel(a[j]) * budget / po[j] - sh[j];
    if (kind == ORDERS_WEIGHTS_LIMITED) {
        const float a0 = clamp0_sel(a[j]);
        const float w = (a0 < max_w ? a0 : max_w) * (fm[j] == FILL_TRADE ? 1.0f : 0.0f);
        const float diff = w * budget / po[j] - sh[j];
        return fm[j] == FILL_HOLD ? 0.0f : diff;
    }
    const int below = a[j] < -1.0f, above = a[j] > 1.0f;
    const float x = below ? -1.0f : (above ? 1.0f : a[j]);
    const int m = fm ? fm[j] : FILL_TRADE;
    const float target = rintf(x * max_shares), held = -sh[j];
    float diff = m == FILL_TRADE ? target : (m == FILL_EXIT ? held : 0.0f);
    if (capped) {
        const float room = clamp0_sel(floorf(cap_value / po[j]) - sh[j]);
        const float buy = minimum_sel(clamp0_sel(diff), room);
        diff = diff > 0.0f ? buy : diff;
    }
    return diff;
}

/* The execution model's two passes over an env's row (envs/core.py's _execute). Pass 1 sizes each
   order (order_diff: no pass of its own, the row is read once) and caps it by the fill bar's volume
   (an EXIT, fm, is not), drops dust sells; sums the sells' proceeds and the buys priced at their
   capped size; leaves the capped buy in tr[] and sell in nsh[]. Pass 2: the buys scaled for cash
   (floored in shares mode), those under the minimum dropped, the rest priced at their own size;
   leaves the trade in tr[] and the new holdings in nsh[]. The volume caps come precomputed per
   (bar, asset) in lim_row[] (+inf: no cap). Branch-free (selects), inlined with constant `kind` /
   `fm` so each copy vectorizes. */
static inline __attribute__((always_inline)) void exec_pass1_body(
    int64_t A, int kind, int capped, const uint8_t *fm, const float *a, float budget, float max_w,
    float max_shares, float cap_value, float *tr, float *nsh, const float *sh, const float *po,
    const float *lim_row, const float *imp, const float *ord, float memory, float mn, float coef,
    const float *half, const double *fees, int rnd, double *sells_out, double *buys_out,
    double *share_fees_out, float *fr)
{
    double sells = 0.0, buys0 = 0.0, share_fees = 0.0;
    const int whole = kind == ORDERS_SHARES;
    float sold[SUM_CHUNK], bought[SUM_CHUNK], shares_sold[SUM_CHUNK];
    for (int64_t j0 = 0; j0 < A; j0 += SUM_CHUNK) {
        const int64_t width = A - j0 < SUM_CHUNK ? A - j0 : SUM_CHUNK;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) {
            const int64_t j = j0 + i;
            const float d = order_diff_sel(kind, capped, j, a, sh, po, fm, budget, max_w, max_shares, cap_value);
            const int exit = fm ? fm[j] == FILL_EXIT : 0;
            const float buy0 = clamp0_sel(d);
            float sell = clamp0_sel(-d);
            if (whole) sell = minimum_sel(sell, sh[j]);
            const float cap = lim_row[j];
            const float lim = exit ? INFINITY : cap;
            const float buy = buy0 < lim ? buy0 : lim;
            sell = sell < lim ? sell : lim;
            /* One of buy and sell is 0: one frac serves both (a dropped sell's is unused). A sell is
               dust when its proceeds at the fill price are under the minimum. */
            const float m = carried_order(ord[j] * memory, buy - sell);
            const float f = fill_frac(buy + sell, m, imp[j], coef, half[j]);
            const int dust = (sell * po[j] * (1.0f - f) < mn) & !exit;
            sell = dust ? 0.0f : sell;
            sold[i] = sell * po[j] * (1.0f - f);
            bought[i] = buy * po[j] * (1.0f + f);
            shares_sold[i] = sell;
            tr[j] = buy;
            nsh[j] = sell;
            fr[j] = f;  /* a buy's frac at its capped size: pass 2 reuses it when the buys are not scaled */
        }
        for (int64_t i = 0; i < width; ++i) {  /* in asset order (see SUM_CHUNK) */
            sells += (double)sold[i];
            buys0 += (double)bought[i];
            share_fees += sell_fee((double)sold[i], shares_sold[i], fees[0], fees[1], fees[2], rnd);
        }
    }
    *sells_out = sells;
    *buys_out = buys0;
    *share_fees_out = share_fees;
}

static inline __attribute__((always_inline)) void exec_pass2_body(
    int64_t A, int whole, int reuse, float scale_f, float *tr, float *nsh, const float *sh, const float *po,
    const float *pc, const float *imp, const float *ord, float *ord_out, float memory, float mn, float coef,
    const float *half, double *buys_out, double *pos_out)
{
    double buys = 0.0, pos_sum = 0.0;
    float bought[SUM_CHUNK], held[SUM_CHUNK];
    for (int64_t j0 = 0; j0 < A; j0 += SUM_CHUNK) {
        const int64_t width = A - j0 < SUM_CHUNK ? A - j0 : SUM_CHUNK;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) {
            const int64_t j = j0 + i;
            float buy = tr[j] * scale_f;
            if (whole) buy = floorf(buy);
            buy = buy * po[j] < mn ? 0.0f : buy;
            const float remembered = ord[j] * memory;
            /* reuse (scale 1, not whole shares): the buy is pass 1's capped size, so is its frac (kept in
               ord_out[j] by pass 1, read before ord_out[j] is written below); a dropped buy is 0 either way */
            const float f = reuse ? ord_out[j] : fill_frac(buy, clamp0_sel(remembered), imp[j], coef, half[j]);
            bought[i] = buy * po[j] * (1.0f + f);
            const float traded = buy - nsh[j];
            ord_out[j] = worked_order(remembered, traded);
            const float ns = sh[j] + traded;
            tr[j] = traded;
            nsh[j] = ns;
            held[i] = pc[j] * ns;
        }
        for (int64_t i = 0; i < width; ++i) {  /* in asset order (see SUM_CHUNK) */
            buys += (double)bought[i];
            pos_sum += (double)held[i];
        }
    }
    *buys_out = buys;
    *pos_out += pos_sum;
}

/* One copy of each pass per (orders, fill modes) and per pass-2 case, so that each loop is branch-free. */
static ELEMENT_LOOPS void exec_pass1_weights(
    int64_t A, int capped, const uint8_t *fm, const float *a, float budget, float max_w,
    float max_shares, float cap_value, float *tr, float *nsh, const float *sh, const float *po,
    const float *lim_row, const float *imp, const float *ord, float memory, float mn, float coef,
    const float *half, const double *fees, int rnd, double *sells_out, double *buys_out,
    double *share_fees_out, float *fr)
{
    exec_pass1_body(A, ORDERS_WEIGHTS, capped, NULL, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po, lim_row, imp, ord, memory, mn, coef, half, fees, rnd, sells_out, buys_out, share_fees_out, fr);
}
static ELEMENT_LOOPS void exec_pass1_weights_limited(
    int64_t A, int capped, const uint8_t *fm, const float *a, float budget, float max_w,
    float max_shares, float cap_value, float *tr, float *nsh, const float *sh, const float *po,
    const float *lim_row, const float *imp, const float *ord, float memory, float mn, float coef,
    const float *half, const double *fees, int rnd, double *sells_out, double *buys_out,
    double *share_fees_out, float *fr)
{
    exec_pass1_body(A, ORDERS_WEIGHTS_LIMITED, capped, fm, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po, lim_row, imp, ord, memory, mn, coef, half, fees, rnd, sells_out, buys_out, share_fees_out, fr);
}
static ELEMENT_LOOPS void exec_pass1_shares(
    int64_t A, int capped, const uint8_t *fm, const float *a, float budget, float max_w,
    float max_shares, float cap_value, float *tr, float *nsh, const float *sh, const float *po,
    const float *lim_row, const float *imp, const float *ord, float memory, float mn, float coef,
    const float *half, const double *fees, int rnd, double *sells_out, double *buys_out,
    double *share_fees_out, float *fr)
{
    exec_pass1_body(A, ORDERS_SHARES, capped, NULL, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po, lim_row, imp, ord, memory, mn, coef, half, fees, rnd, sells_out, buys_out, share_fees_out, fr);
}
static ELEMENT_LOOPS void exec_pass1_shares_modes(
    int64_t A, int capped, const uint8_t *fm, const float *a, float budget, float max_w,
    float max_shares, float cap_value, float *tr, float *nsh, const float *sh, const float *po,
    const float *lim_row, const float *imp, const float *ord, float memory, float mn, float coef,
    const float *half, const double *fees, int rnd, double *sells_out, double *buys_out,
    double *share_fees_out, float *fr)
{
    exec_pass1_body(A, ORDERS_SHARES, capped, fm, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po, lim_row, imp, ord, memory, mn, coef, half, fees, rnd, sells_out, buys_out, share_fees_out, fr);
}
static ELEMENT_LOOPS void exec_pass2_whole(
    int64_t A, float scale_f, float *tr, float *nsh, const float *sh, const float *po,
    const float *pc, const float *imp, const float *ord, float *ord_out, float memory, float mn, float coef,
    const float *half, double *buys_out, double *pos_out)
{
    exec_pass2_body(A, 1, 0, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, buys_out, pos_out);
}
static ELEMENT_LOOPS void exec_pass2_reuse(
    int64_t A, float scale_f, float *tr, float *nsh, const float *sh, const float *po,
    const float *pc, const float *imp, const float *ord, float *ord_out, float memory, float mn, float coef,
    const float *half, double *buys_out, double *pos_out)
{
    exec_pass2_body(A, 0, 1, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, buys_out, pos_out);
}
static ELEMENT_LOOPS void exec_pass2_scaled(
    int64_t A, float scale_f, float *tr, float *nsh, const float *sh, const float *po,
    const float *pc, const float *imp, const float *ord, float *ord_out, float memory, float mn, float coef,
    const float *half, double *buys_out, double *pos_out)
{
    exec_pass2_body(A, 0, 0, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, buys_out, pos_out);
}

#pragma GCC pop_options

/* Returns -1 if any action is NaN or inf, -2 if a decision bar is outside [0, n_bars - 1 - k] (the
   outputs are then garbage and the caller raises), else the number of envs whose episode ended. */
int64_t podracer_step(
    int64_t n_envs, int64_t n_assets, int64_t obs_width, int64_t num_features, int64_t n_bars, int64_t k,
    int64_t last_bar, int64_t episode_len,
    int32_t action_mode, int32_t reward_mode, const double *p, int32_t n_threads,
    /* state (N,) / (N, A) */
    const int64_t *t, const double *cash, const float *shares, const double *value, const double *peak,
    const int64_t *step_count, const double *sharpe_a, const double *sharpe_b, const int64_t *rng,
    const float *order, const float *action,
    /* market: (T, A) prices, (T, obs_width) observation template, (T, A) fill modes, (T, 4A)
       execution table (NULL: the execution model is off): per decision bar t, the fill bar t + 1's
       open and volume cap in shares (from its volume expected at bar t; +inf: none), then bar t's
       impact scale and the size-free part of the fill's price, slippage + half-spread
       (envs/kernels/native.py) */
    const float *open_all, const float *close_all, const float *table, const uint8_t *modes_all,
    const float *exec_all,
    /* (T, 3) the sell fees' rates by each bar's session (envs/fees.py's fee_table): per $ of proceeds,
       per share sold, the per-share fee's cap per trade; a fill at bar b reads row b */
    const double *fees_all,
    /* outputs */
    int64_t *t_out, double *cash_out, float *shares_out, double *value_out, double *peak_out,
    int64_t *step_count_out, double *a_out, double *b_out, int64_t *rng_out, float *order_out, float *reward_out,
    uint8_t *terminated_out, uint8_t *truncated_out, uint8_t *done_out, double *cost_out,
    double *traded_notional_out, float *traded_out, float *obs_out)
{
    const int64_t A = n_assets;
    const double rate = p[P_BUY_RATE], slip = p[P_SLIP];
    const int rnd = p[P_ROUND_FEES] != 0.0;
    const double floor_value = p[P_BUST_FRAC] * p[P_INITIAL_CASH];
    const int64_t stride = 2 + num_features;  /* per-asset slot width: weight, tradable, features */
    const int capped = p[P_MAX_WEIGHT] < 1.0;
    const float max_w = capped ? (float)p[P_MAX_WEIGHT] : INFINITY;
    /* The general weights loops (cap, fill modes) read modes_all, which the caller passes whenever
       there is a cap or an untradable bar (NULL: the plain loops). */
    const int limited = modes_all != NULL;
    int64_t bad = 0, bad_bar = 0, n_done = 0;

#pragma omp parallel for schedule(static) num_threads(n_threads) reduction(+ : bad, bad_bar, n_done)
    for (int64_t n = 0; n < n_envs; ++n) {
        if (t[n] < 0 || t[n] > n_bars - 1 - k) { /* (t + k could overflow) */
            bad_bar += 1;
            continue;
        }
        const float *a = action + n * A;
        const float *sh = shares + n * A;
        const int64_t tm = t[n] + k;
        /* The fill bar's open: with the execution model, the first quarter of the env's execution-table
           row (its volume caps, impact scales and half-costs follow it: one contiguous read). */
        const float *fill_row = exec_all ? exec_all + t[n] * 4 * A : NULL;
        const float *po = fill_row ? fill_row : open_all + (t[n] + 1) * A;
        const float *pc = close_all + tm * A;
        const uint8_t *fm = modes_all ? modes_all + (t[n] + 1) * A : NULL; /* NULL: all tradable */
        float *tr = traded_out + n * A;  /* holds the order diff until the last pass */
        float *nsh = shares_out + n * A;
        const float *ord = order + n * A;  /* the impact memory (EnvState.order) */
        const double *fees = fees_all + (t[n] + 1) * 3;  /* the fill bar's fee rates */
        const double sell_rate = fees[0], per_share = fees[1], share_cap = fees[2];
        float *ord_out = order_out + n * A;
        float *obs = obs_out + n * obs_width;
        const double c = cash[n];

        /* The step is bound by the latency of its random row reads (each env's price rows and
           observation template row sit at its own bar, mostly in DRAM): ask for the next env's rows
           now, so that they arrive while this env computes. */
        if (n + PREFETCH_AHEAD < n_envs) {
            const int64_t tn = t[n + PREFETCH_AHEAD];
            if (tn >= 0 && tn + k <= n_bars - 1) {
                if (exec_all) prefetch_row(exec_all + tn * 4 * A, 4 * A * (int64_t)sizeof(float));
                else prefetch_row(open_all + (tn + 1) * A, A * (int64_t)sizeof(float));
                prefetch_row(close_all + (tn + k) * A, A * (int64_t)sizeof(float));
                prefetch_row(table + (tn + k) * obs_width, obs_width * (int64_t)sizeof(float));
                if (modes_all) prefetch_row(modes_all + (tn + 1) * A, A);
            }

        }
        memcpy(obs, table + tm * obs_width, (size_t)obs_width * sizeof(float));

        int64_t nonfinite = 0;
#pragma omp simd reduction(+ : nonfinite)
        for (int64_t j = 0; j < A; ++j) nonfinite += !isfinite(a[j]);
        bad += nonfinite != 0;

        /* Pass A sizes the orders: weights mode's budget per unit of weight (the cap before the sum
           rule: a capped weight's excess stays in cash, envs/core.py; untradable assets get no
           target), shares mode's cap on post-trade holdings in $ (only buys are cut). */
        const int kind =
            action_mode == MODE_SHARES ? ORDERS_SHARES : (limited ? ORDERS_WEIGHTS_LIMITED : ORDERS_WEIGHTS);
        const float max_shares = (float)p[P_MAX_SHARES];
        float budget = 0.0f, cap_value = INFINITY;
        if (kind == ORDERS_WEIGHTS) {
            /* No cap and every bar tradable (the training default): the plain loop. */
            double held = 0.0, wsum = 0.0;
#pragma omp simd reduction(+ : held, wsum)
            for (int64_t j = 0; j < A; ++j) {
                held += (double)(sh[j] * po[j]);
                wsum += (double)clamp_min_f(a[j], 0.0f);
            }
            budget = (float)((c + held) / clamp_min_d(wsum, 1.0));
        } else if (kind == ORDERS_WEIGHTS_LIMITED) {
            double held = 0.0, wsum = 0.0;
#pragma omp simd reduction(+ : held, wsum)
            for (int64_t j = 0; j < A; ++j) {
                held += (double)(sh[j] * po[j]);
                /* (a plain min: a NaN action makes the step fail anyway, see `bad`) */
                const float a0 = clamp_min_f(a[j], 0.0f);
                wsum += (double)((a0 < max_w ? a0 : max_w) * (fm[j] == FILL_TRADE ? 1.0f : 0.0f));
            }
            budget = (float)((c + held) / clamp_min_d(wsum, 1.0));
        } else if (capped) {
            double held = 0.0;
#pragma omp simd reduction(+ : held)
            for (int64_t j = 0; j < A; ++j) held += (double)(sh[j] * po[j]);
            cap_value = (float)(p[P_MAX_WEIGHT] * (c + held));
        }
        double sell_notional = 0.0, buy_notional = 0.0, sell_fees = 0.0;
        double available, needed, pos_sum = 0.0;
        if (exec_all) {
            /* The execution model, envs/core.py's _execute: the orders (shares mode: sells not yet
               limited to holdings) are capped by the fill bar's volume (an EXIT is not), dust sells
               dropped; buys priced at their capped size give the cash scale; scaled buys (floored in
               shares mode) under the minimum are dropped, the rest priced at their size. */
            const float *lim = fill_row + A, *imp = fill_row + 2 * A, *half = fill_row + 3 * A;
            const float coef = (float)p[P_IMPACT_COEF];
            const float mn = (float)p[P_MIN_NOTIONAL];
            const float memory = (float)p[P_MEMORY];
            const int whole = action_mode == MODE_SHARES;
            double sells = 0.0, buys0 = 0.0, buys = 0.0, share_fees = 0.0;
            /* One specialized copy per (orders, fill modes) so that each loop is branch-free and
               vectorizes. */
            if (kind == ORDERS_WEIGHTS)
                exec_pass1_weights(A, 0, NULL, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po,
                           lim, imp, ord, memory, mn, coef, half, fees, rnd, &sells, &buys0,
                           &share_fees, ord_out);
            else if (kind == ORDERS_WEIGHTS_LIMITED)
                exec_pass1_weights_limited(A, 0, fm, a, budget, max_w, max_shares, cap_value, tr, nsh, sh,
                           po, lim, imp, ord, memory, mn, coef, half, fees, rnd, &sells, &buys0,
                           &share_fees, ord_out);
            else if (fm)
                exec_pass1_shares_modes(A, capped, fm, a, budget, max_w, max_shares, cap_value, tr, nsh, sh, po,
                           lim, imp, ord, memory, mn, coef, half, fees, rnd, &sells, &buys0,
                           &share_fees, ord_out);
            else
                exec_pass1_shares(A, capped, NULL, a, budget, max_w, max_shares, cap_value, tr, nsh, sh,
                           po, lim, imp, ord, memory, mn, coef, half, fees, rnd, &sells, &buys0,
                           &share_fees, ord_out);
            sell_fees = rnd ? share_fees : sells * sell_rate + share_fees;
            available = c + sells - sell_fees;
            const double needed0 = buys0 * (1.0 + rate);
            const double scale = needed0 > available ? available / clamp_min_d(needed0, TINY) : 1.0;
            const float scale_f = (float)scale;
            if (whole)
                exec_pass2_whole(A, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, &buys,
                           &pos_sum);
            else if (scale_f == 1.0f)
                exec_pass2_reuse(A, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, &buys,
                           &pos_sum);
            else
                exec_pass2_scaled(A, scale_f, tr, nsh, sh, po, pc, imp, ord, ord_out, memory, mn, coef, half, &buys,
                           &pos_sum);
            sell_notional = sells;
            buy_notional = buys;
            needed = buys * (1.0 + rate);
        } else {
            /* Pass B (frictionless fill): the orders in tr[], their notionals at the open; no impact,
               so the impact memory is carried as it is. */
            memcpy(ord_out, ord, (size_t)A * sizeof(float));
            double sells = 0.0, buys = 0.0, share_fees = 0.0;
            const double keep = 1.0 - slip;  /* a sale's proceeds per $ at the open */
            if (kind == ORDERS_WEIGHTS) {
#pragma omp simd reduction(+ : sells, buys, share_fees)
                for (int64_t j = 0; j < A; ++j) {
                    const float diff =
                        order_diff(ORDERS_WEIGHTS, 0, j, a, sh, po, NULL, budget, max_w, max_shares, cap_value);
                    const float buy = clamp_min_f(diff, 0.0f);
                    const float sold = buy - diff, proceeds = sold * po[j];
                    tr[j] = diff;
                    sells += (double)proceeds;
                    buys += (double)(buy * po[j]);
                    share_fees += sell_fee((double)proceeds * keep, sold, sell_rate, per_share, share_cap, rnd);
                }
            } else if (kind == ORDERS_WEIGHTS_LIMITED) {
#pragma omp simd reduction(+ : sells, buys, share_fees)
                for (int64_t j = 0; j < A; ++j) {
                    const float diff =
                        order_diff(ORDERS_WEIGHTS_LIMITED, 0, j, a, sh, po, fm, budget, max_w, max_shares, cap_value);
                    const float buy = clamp_min_f(diff, 0.0f);
                    const float sold = buy - diff, proceeds = sold * po[j];
                    tr[j] = diff;
                    sells += (double)proceeds;
                    buys += (double)(buy * po[j]);
                    share_fees += sell_fee((double)proceeds * keep, sold, sell_rate, per_share, share_cap, rnd);
                }
            } else {
#pragma omp simd reduction(+ : sells, buys, share_fees)
                for (int64_t j = 0; j < A; ++j) {
                    const float diff =
                        order_diff(ORDERS_SHARES, capped, j, a, sh, po, fm, budget, max_w, max_shares, cap_value);
                    const float buy = clamp_min_f(diff, 0.0f);
                    const float sold = minimum_f(buy - diff, sh[j]), proceeds = sold * po[j];
                    tr[j] = diff;  /* (the capped buy: a buy is never also a sell) */
                    sells += (double)proceeds;
                    buys += (double)(buy * po[j]);
                    share_fees += sell_fee((double)proceeds * keep, sold, sell_rate, per_share, share_cap, rnd);
                }
            }
            sell_notional = sells * (1.0 - slip);
            buy_notional = buys * (1.0 + slip);
            sell_fees = rnd ? share_fees : sell_notional * sell_rate + share_fees;
            available = c + sell_notional - sell_fees;
            needed = buy_notional * (1.0 + rate);
            const double scale = needed > available ? available / clamp_min_d(needed, TINY) : 1.0;

            if (action_mode == MODE_WEIGHTS) {
                const float factor = (float)(scale - 1.0);
#pragma omp simd reduction(+ : pos_sum)
                for (int64_t j = 0; j < A; ++j) {
                    const float diff = tr[j];
                    const float traded = diff + clamp_min_f(diff, 0.0f) * factor;
                    const float ns = sh[j] + traded;
                    tr[j] = traded;
                    nsh[j] = ns;
                    pos_sum += (double)(pc[j] * ns);
                }
                buy_notional *= scale;
                needed *= scale;
            } else {
                const float scale_f = (float)scale;
                double bought = 0.0;
#pragma omp simd reduction(+ : pos_sum, bought)
                for (int64_t j = 0; j < A; ++j) {
                    const float diff = tr[j];
                    const float buy0 = clamp_min_f(diff, 0.0f);
                    const float sell = minimum_f(buy0 - diff, sh[j]);
                    const float buy = floorf(buy0 * scale_f);
                    const float traded = buy - sell;
                    const float ns = sh[j] + traded;
                    tr[j] = traded;
                    nsh[j] = ns;
                    bought += (double)(buy * po[j]);
                    pos_sum += (double)(pc[j] * ns);
                }
                buy_notional = bought * (1.0 + slip);
                needed = buy_notional * (1.0 + rate);
            }
        }
        double new_cash = available - needed;
        new_cash = new_cash < 0.0 ? 0.0 : new_cash;
        const double traded_notional = sell_notional + buy_notional;
        const double new_value = new_cash + pos_sum;

        /* Reward (per-env float64, as in step_core). */
        const double ratio = new_value / value[n];
        double reward, na = sharpe_a[n], nb = sharpe_b[n];
        if (reward_mode == REWARD_LOG_RETURN) {
            reward = log(clamp_min_d(ratio, TINY));
        } else if (reward_mode == REWARD_RETURN) {
            reward = ratio - 1.0;
        } else {
            const double ret = ratio - 1.0, sa = sharpe_a[n], sb = sharpe_b[n];
            const double d_a = ret - sa, d_b = ret * ret - sb;
            const double var = clamp_min_d(sb - sa * sa, SHARPE_VAR_EPS);
            reward = (sb * d_a - 0.5 * sa * d_b) / (var * sqrt(var));
            na = sa + p[P_SHARPE_ETA] * d_a;
            nb = sb + p[P_SHARPE_ETA] * d_b;
        }
        const double new_peak = maximum_d(peak[n], new_value);
        if (p[P_DRAWDOWN_PENALTY] > 0.0) reward = reward - p[P_DRAWDOWN_PENALTY] * (1.0 - new_value / new_peak);
        if (p[P_TURNOVER_PENALTY] > 0.0) reward = reward - p[P_TURNOVER_PENALTY] * traded_notional / value[n];
        if (p[P_REWARD_SCALE] != 1.0) reward = reward * p[P_REWARD_SCALE];

        const int64_t sc = step_count[n] + 1;
        const int terminated = new_value < floor_value;
        const int done = (sc >= episode_len) | (tm > last_bar) | terminated;
        n_done += done;

        t_out[n] = tm;
        cash_out[n] = new_cash;
        value_out[n] = new_value;
        peak_out[n] = new_peak;
        step_count_out[n] = sc;
        a_out[n] = na;
        b_out[n] = nb;
        /* The LCG in uint64 (wraps like torch's int64 arithmetic, without signed overflow in C). */
        rng_out[n] = (int64_t)((uint64_t)rng[n] * 6364136223846793005ULL + 1442695040888963407ULL);
        reward_out[n] = (float)reward;
        terminated_out[n] = (uint8_t)terminated;
        truncated_out[n] = (uint8_t)(done ^ terminated);
        done_out[n] = (uint8_t)done;
        cost_out[n] = rate * buy_notional + sell_fees;
        traded_notional_out[n] = traded_notional;

        /* The observation: cash fraction and position weights over the template row. The layout is
           envs/observation.py's (C cannot import it): the cash fraction in slot CASH = 0, the weights
           at NUM_GLOBAL + a * (2 + F) + WEIGHT = 2 + a * stride; the rest (time of day, tradable
           flags, features) comes from the template row. tests/test_native.py pins these observations to observation.py's writer. */
        const double inv = 1.0 / clamp_min_d(new_value, TINY);
        const float inv_f = (float)inv;
        obs[0] = (float)(new_cash * inv);
        float *w = obs + 2;
        for (int64_t j = 0; j < A; ++j) w[j * stride] = (pc[j] * nsh[j]) * inv_f;
    }
    return bad_bar ? -2 : (bad ? -1 : n_done);
}
