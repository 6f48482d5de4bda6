#!/usr/bin/env bash
# headway's GPU measurements, each step one command of under 10 minutes on one H100:
#
#   scripts/gpu_session.sh bench       training throughput: headway vs a plain loop vs torch.func (~8 min)
#   scripts/gpu_session.sh attention   the attention kernels inside headway's training step, per shape (~4 min)
#   scripts/gpu_session.sh llc         LLC sampling: headway vs devinterp 1.x, then compiled vs eager (~5 min;
#                                      needs devinterp)
#   scripts/gpu_session.sh retrieval   the retrieval study at --scale gpu, one piece (exit 75: run it again)
#   scripts/gpu_session.sh sorting     the sorting study at --scale gpu, likewise
#
# A second argument sets a study piece's minutes (default 9). Outputs go to $OUT (default ./gpu-out): the
# benchmark tables, the GPU's name, each study's log and its folder packed without checkpoints and resume
# states. The study itself lives in runs/<study>-gpu (ignored by git, so refreshing the checkout from a
# clean copy leaves it in place) and the next piece on the same machine continues it; its checkpoints
# (about 29 GiB for retrieval, 4 for sorting) never leave that machine, so a study is finished where it
# was started. Unpack the last <study>-gpu.tgz into results/ to commit it. The machine's own torch is used:
# headway is installed without dependencies and nothing is downloaded. A wheel directory .whl/ (e.g.
# devinterp for `llc`) is installed first when present.
set -uo pipefail

step=${1:?usage: scripts/gpu_session.sh bench|attention|llc|retrieval|sorting [minutes]}
minutes=${2:-9}
case "$step" in
bench | attention | llc | retrieval | sorting) ;;
*)
    echo "unknown step '$step'; choose bench, attention, llc, retrieval or sorting" >&2
    exit 2
    ;;
esac
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/headway-site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/headway-site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$out/install.log" 2>&1 ||
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
headway() { python3 -c 'import sys; from headway.cli.main import main; sys.exit(main(sys.argv[1:]))' "$@"; }

case "$step" in
bench)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$out/gpu.csv"
    # bf16 and compiled (the GPU defaults) against eager bf16 baselines, then like for like (all compiled)
    timeout 330 python3 benchmarks/bench_training.py --device cuda --shapes paper,cpu --ensemble-sizes 1,8,64 \
        --rounds 3 --steps 20 2>&1 | tee "$out/bench_training.md"
    timeout 150 python3 benchmarks/bench_training.py --device cuda --shapes paper --ensemble-sizes 64 \
        --rounds 3 --steps 20 --compile-baselines 2>&1 | tee -a "$out/bench_training.md"
    timeout 90 python3 benchmarks/bench_training.py --device cuda --shapes paper --ensemble-sizes 64 \
        --rounds 3 --steps 20 --ways headway --compile graphs 2>&1 | tee -a "$out/bench_training.md"
    ;;
attention)
    timeout 400 python3 benchmarks/bench_attention.py --device cuda --rounds 3 --steps 10 2>&1 |
        tee "$out/bench_attention.md"
    ;;
llc)
    timeout 500 python3 benchmarks/bench_llc.py --device cuda --instances 8 --chains 8 --draws 200 \
        --train-steps 1500 --repeats 3 --precision auto 2>&1 | tee "$out/bench_llc.md"
    timeout 200 python3 benchmarks/bench_llc.py --device cuda --compile --instances 8 --chains 8 --draws 200 \
        --repeats 3 --precision auto 2>&1 | tee -a "$out/bench_llc.md"
    ;;
retrieval | sorting)
    folder="runs/$step-gpu"
    headway study "$step" --scale gpu --device cuda --time-limit "$minutes" --no-progress --out "$folder" \
        2>&1 | tee -a "$out/$step.log"
    status=${PIPESTATUS[0]}
    tar --exclude=checkpoints --exclude=resume -czf "$out/$step-gpu.tgz" -C runs "$step-gpu"
    exit "$status"
    ;;
esac
