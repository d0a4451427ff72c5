"""Broken ex11_quiz: typical wrong answers. Q1 takes the FLOPs for the saving; Q5 counts K and V as read
once, not once per query block (32.9, which the report answered only with '32.9 is not within 1% of the
answer' and 'compare with the exercise's docstring'); Q6 counts the one query row as a full block of
128 rows (exercise 05's ragged-block mistake). Q2-Q4 are left unanswered."""
Q1 = "a"
Q2 = None
Q3 = None
Q4 = None
Q5 = (4 * 4096 * 128 + 4 * 4096 * 4096) * 2 / ((4096 * 128 + 2 * 4096 * 128 + 4096 * 128) * 2 + 4096 * 4)
Q6 = (2 * 128 + 2 * 4096 * 128 + 4 * 4096) * 2 / ((128 * 128 + 2 * 4096 * 128 + 128 * 128) * 2 + 128 * 4)
