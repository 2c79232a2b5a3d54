# Source on the lent GPU machine (no network, no project install): the carried wheelhouse goes to
# /tmp/site and `kernevo` runs from the working tree.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m kernevo.cli "$@"\n' >/tmp/bin/kernevo
chmod +x /tmp/bin/kernevo && export PATH=/tmp/bin:$PATH
