"""`python -m benchmarks`: see benchmarks/README.md (`python -m benchmarks llm`: the LLM
speed benchmark of benchmarks/llm.py; `python -m benchmarks serve`: rlx-serve under
concurrent clients, benchmarks/serve.py; `python -m benchmarks profile`: a decode step's
thread balance, benchmarks/decode_profile.py; `python -m benchmarks train`: training steps
against torch, benchmarks/train.py)."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["llm"]:
        from benchmarks.llm import main as llm_main

        llm_main(sys.argv[2:])
    elif sys.argv[1:2] == ["train"]:
        from benchmarks.train import main as train_main

        train_main(sys.argv[2:])
    elif sys.argv[1:2] == ["profile"]:
        from benchmarks.decode_profile import main as profile_main

        profile_main(sys.argv[2:])
    elif sys.argv[1:2] == ["serve"]:
        from benchmarks.serve import main as serve_main

        serve_main(sys.argv[2:])
    else:
        from benchmarks.cli import main

        main()
