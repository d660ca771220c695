"""A scheduler's state carried across a stop (state.py), one module per kind of scheduler, each
naming the attributes of Ray's that it carries and checking that Ray still has them."""
