"""Zygo's Python language agent.

The agent runs inside a function's sandbox. It imports the user's handler once, becomes a
*zygote*, and serves each request in a forked child (``--mode fork``) or in its own process
(``--mode spawn``). The contract with the Go supervisor is ``docs/protocol.md``; module by
module:

- ``__main__``: argument parsing and start-up order (protocol "Start-up", steps 1-5);
- ``wire``: SEQPACKET JSON datagrams with ``SCM_RIGHTS`` and ``SCM_CREDENTIALS``;
- ``recorder``: the intent recorder installed before the user import;
- ``loader``: importing ``MODULE:FUNC`` from the code directory;
- ``warmup``: the checks reported in ``ready``;
- ``zygote``: the fork loop, reaping and ``exited`` reports, and spawn mode;
- ``child``: request steps 3-6, from ``hello`` to ``os._exit``;
- ``reseed``: the one reseed hook list (after fork, and after a sandbox restore);
- ``reseedcore``: the hooks themselves, Zygo's one reseed module (stdlib only, no relative
  imports): the SDK carries a copy and the guest's interpreter embeds it;
- ``fdreset``: rule 9, replacing inherited kernel objects;
- ``libc``: the few C calls made through ctypes;
- ``agentlog``: lock-free diagnostics on the agent's stderr.

The package is stdlib-only and must import nothing lazily once the user's code is on
``sys.path`` (a user module could shadow a standard one).
"""
