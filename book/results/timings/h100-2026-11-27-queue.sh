#!/bin/bash
# One GPU call (2026-11-27): cifar_features colab groups still pending (issue 46 item 5), then
# the NTK bench (issue 43 item 4) with whatever time is left. Results copied to $OUT after each group.
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET:-520}))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ITLIN_PROGRESS=text
L=/tmp/log; mkdir -p $L /tmp/res /tmp/ck
ev(){ echo "$(date +%s) $*" | tee -a $OUT/events.log; }
ev start
nvidia-smi -L > $L/gpu.txt 2>&1; python3 -c "import jax,optax;print(jax.__version__,optax.__version__,jax.devices())" >> $L/gpu.txt 2>&1
python3 .gpu/make_cifar10_batches.py .gpu/cifar10-jpeg.npz /tmp/data > /dev/null 2>&1; ev data rc=$?
cp book/results/*.json /tmp/res/
for g in fig4_n4000 fig4_fast_n4000 fig4_n16000 fig4_fast_n16000; do
  left=$((DEADLINE - $(date +%s)))
  [ $left -lt 40 ] && { ev skip $g; continue; }
  ev begin $g left=$left
  timeout --signal=INT --kill-after=10 $left python3 -m itlin_core.book.record cifar_features --preset colab \
    --data /tmp/data --names $g --no-verify --data-note "CIFAR10 decoded from a JPEG copy" \
    --checkpoint-dir /tmp/ck --results-dir /tmp/res > $L/rec-$g.txt 2>&1
  ev end $g rc=$?; tail -c 600 $L/rec-$g.txt >> $OUT/events.log
  cp /tmp/res/cifar_features-colab.json $OUT/
done
left=$((DEADLINE - $(date +%s)))
[ $left -gt 30 ] && { timeout $left python3 -m itlin_core.book.bench --ntk > $L/bench_ntk.txt 2>&1; ev bench_ntk rc=$?; }
tar czf $OUT/ck.tgz -C /tmp ck 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp log; ev done
