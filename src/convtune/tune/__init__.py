"""Choosing and shipping a winner: the head-to-head contest, promote, micro-tune neighbours, the export."""
