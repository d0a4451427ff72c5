"""Broken ex11_quiz: answers a number question with a 400-digit integer (float() of it overflowed in
the comparison, which the grader then reported as an internal error of its own)."""
Q5 = 10 ** 399
