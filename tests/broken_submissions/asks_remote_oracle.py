"""Cheating ex01_naive: sends the inputs over UDP to a server of the learner's (which runs the course's
library there) and returns its reply; TCP is refused by Landlock, UDP only by seccomp."""
import pickle
import socket


def naive_attention(q, k, v, causal=False, scale=None):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as oracle:
        oracle.settimeout(1.0)
        oracle.sendto(pickle.dumps((q, k, v, causal, scale)), ("127.0.0.1", 9))
        return pickle.loads(oracle.recv(1 << 16))
