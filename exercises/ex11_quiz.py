"""Exercise 11: self-test questions. Set each answer, then ``check("ex11_quiz")``.

Q1-Q4: a letter. Q5-Q6: a number (1% tolerance); compute it with your exercise 01 and 05
functions, or by hand.
"""

# Q1. Which resource does FlashAttention save, compared with standard attention?
#   (a) floating-point operations  (b) reads and writes of HBM (GPU main memory)
#   (c) on-chip SRAM capacity      (d) the number of exp() evaluations
Q1 = None

# Q2. Which of these does FlashAttention NOT reduce?
#   (a) the matmul FLOPs of the forward pass  (b) HBM traffic of S and P
#   (c) memory used to store the attention matrix  (d) reads of S from HBM
Q2 = None

# Q3. Why is the online softmax exact, not an approximation?
#   (a) float32 rounding errors are too small to matter
#   (b) it uses an estimate of the max that is usually right
#   (c) multiplying the running sum by exp(m_old - m_new) turns a sum taken relative to the old max
#       into exactly the sum relative to the new max, so the final l equals sum_j exp(x_j - max)
#   (d) softmax is linear, so chunks can be normalised separately and added
Q3 = None

# Q4. Why does prefill (many query rows) gain more from FlashAttention than decode (one query row)?
#   (a) decode is compute-bound, so memory traffic does not matter
#   (b) FlashAttention cannot run with a single query row
#   (c) decode uses larger tiles, which cancel the gain
#   (d) with Nq = 1, S and P are 1 x Nk: tiny next to K and V, which every method must read,
#       so there is little traffic left to save
Q4 = None

# Q5. Naive attention's HBM bytes divided by the FlashAttention-2 forward's HBM bytes for prefill:
#     Nq = Nk = 4096, d = dv = 128, fp16 (itemsize 2), lse in fp32 (stat_itemsize 4),
#     block_q = block_k = 128, not causal. (A ratio, about 1-100.)
Q5 = None

# Q6. The same ratio for decode: Nq = 1, Nk = 4096, everything else as in Q5.
Q6 = None
