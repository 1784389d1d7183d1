"""Paper trading: the decision cycle, order planning, the broker and the journal."""
