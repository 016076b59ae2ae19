"""``python -m admm_core.deepfacto bench|evaluate|grid``: the older spelling of ``admm deepfacto ...``."""

import sys

if __name__ == "__main__":
    from ..cli import deepfacto_main

    sys.exit(deepfacto_main(sys.argv[1:]))
