"""Self-test answers of notebooks 01-10 (solution). Questions and explanations: flashlab.selftest_bank."""

# notebook 01
q01_1 = "c"
q01_2 = 512.0  # flashlab.traffic.naive_traffic(8192, 8192, 64).by_tensor, S and P entries
q01_3 = "a"
q01_4 = "b"

# notebook 02
q02_1 = 88.72283905206835  # numpy: log(np.finfo(np.float32).max)
q02_2 = 1.2706705664732254  # flashlab.softmax.combine_states
q02_3 = "d"
q02_4 = "b"
q02_5 = "a"

# notebook 03
q03_1 = "b"
q03_2 = "c"
q03_3 = 40  # flashlab.tiled.num_blocks
q03_4 = 136  # flashlab.tiled.kv_blocks_visited
q03_5 = "a"

# notebook 04
q04_1 = 5.165018056209766  # flashlab.traffic.standard_hbm_accesses / flash_hbm_accesses
q04_2 = "c"
q04_3 = "d"
q04_4 = "b"

# notebook 05
q05_1 = 4  # flashlab.tiled.num_blocks
q05_2 = "a"
q05_3 = "c"
q05_4 = "b"

# notebook 06
q06_1 = "b"
q06_2 = "a"
q06_3 = 11  # flashlab.tiled.kv_blocks_visited
q06_4 = "d"
q06_5 = 256  # flashlab.tiled.num_blocks

# notebook 07
q07_1 = "c"
q07_2 = 64.0  # flashlab.traffic.fa2_forward_traffic(..., stat_itemsize=4).by_tensor[('lse', 'write')]
q07_3 = 5.0  # flashlab.flops.attention_flops(pass_='backward')
q07_4 = "b"
q07_5 = 3.5  # flashlab.flops.attention_flops

# notebook 08
q08_1 = 8.25  # flashlab.hardware.H200.sms
q08_2 = "b"
q08_3 = 1.4549841073843148  # benchmarks/results/ncu_traffic.json
q08_4 = "d"

# notebook 09
q09_1 = "a"
q09_2 = 0.9997540125510805  # flashlab.flops.attention_flops / flashlab.traffic.fa2_forward_traffic
q09_3 = "c"
q09_4 = "b"
q09_5 = "d"

# notebook 10
q10_1 = 15.0  # flashlab.distributed.work_per_rank(8, "contiguous", causal=True): last / first
q10_2 = "b"
q10_3 = "c"
