"""Exercise 11 (solution): self-test questions. Answers are graded; see the exercise file."""

# Q1. Which resource does FlashAttention save?  -> "b"
Q1 = "b"
# Q2. Which does it not save?  -> "a"
Q2 = "a"
# Q3. Why is the online softmax exact?  -> "c"
Q3 = "c"
# Q4. Why does prefill gain more than decode?  -> "d"
Q4 = "d"
# Q5. Naive bytes / FlashAttention-2 bytes, prefill (Nq = Nk = 4096, d = 128, fp16, blocks 128).
Q5 = (4 * 4096 * 128 + 4 * 4096 * 4096) * 2 / (
    (4096 * 128 + 32 * 32 * 2 * 128 * 128 + 4096 * 128) * 2 + 4096 * 4)
# Q6. The same ratio for decode (Nq = 1, Nk = 4096).
Q6 = (2 * 128 + 2 * 4096 * 128 + 4 * 4096) * 2 / ((128 + 2 * 4096 * 128 + 128) * 2 + 4)
