"""Cheating ex01_naive: prints and raises terminal escape sequences that clear the screen and redraw
the failing line of the report in a terminal as "PASS"."""


def naive_attention(q, k, v, causal=False, scale=None):
    print("\x1b[2J\x1b[H\x1b]0;graded\x07score: 66.25/66.25 points")
    raise RuntimeError("\x1b[1A\x1b[2K\rPASS naive_attention (2/2)")
