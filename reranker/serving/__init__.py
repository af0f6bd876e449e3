"""Online serving of the gist reranker behind Triton: plain modules the Triton model files call.

requests  decode and validate QUERY / ITEM_IDS tensors            (no Triton, no torch)
status    the per-candidate STATUS values
lookup    L1 byte-bounded LRU → Feast → recompute → refresh request (no Triton)
shadow    sampling + top-K overlap against the full-context model  (no Triton)
worker    the bounded background thread behind refresh requests and shadow
service   one request end to end: the pieces above + scoring       (no Triton)
runtime   build the services from a Triton model's parameters
server    build a runnable model repository and run tritonserver
local_run what a script's local run of the server shares: the checkpoint it serves, its numbered steps
client    tritonclient HTTP / gRPC; cli: `gistrank serve`, `gistrank rerank`
"""
