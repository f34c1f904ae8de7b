#!/bin/bash
# The GPU session's queue: benchmarks, then one record command per run group (so that each
# group's allocator peak is its own), in the order of the chapters' cost, cheapest first.
cd /root/itlin
export PYTHONPATH=/root/itlin PYTHONUNBUFFERED=1 ITLIN_PROGRESS=text
L=/root/log
ev(){ echo "$(date +%s) $*" >> $L/events.log; }
ev queue-start
python3 -m itlin_core.book.bench > $L/bench.txt 2>&1; ev bench rc=$?
python3 -m itlin_core.book.bench --conv --width 50 --batch 256 > $L/bench_conv.txt 2>&1; ev bench_conv rc=$?
python3 .gpu/tf32.py > $L/tf32.txt 2>&1; ev tf32 rc=$?
while [ ! -f /root/data/CIFAR_DONE ]; do sleep 2; done
CNOTE="CIFAR10 decoded from a JPEG copy"
MNOTE="CIFAR10 decoded from a JPEG copy; MNIST the original files (not checked against their checksums by the record command)"
for spec in cifar_damping:fig8_sgd cifar_damping:fig8_adam cifar_damping:fig9 \
    cifar_features:fig4_n1000 cifar_features:fig4_n4000 cifar_features:fig4_n16000 cifar_features:fig5_6 \
    resnet_mnist:fig10_plain resnet_mnist:fig10_bn resnet_mnist:cifar_lr1e-5 resnet_mnist:cifar_lr1e-4 resnet_mnist:mnist_lr1e-4 \
    cifar_few_updates:fig11_full cifar_few_updates:fig11_mini cifar_few_updates:fig3_tgn cifar_few_updates:fig2 \
    cifar_few_updates:fig3 cifar_few_updates:fig3_rules; do
  ch=${spec%%:*}; g=${spec#*:}
  note=$CNOTE; [ $ch = resnet_mnist ] && note=$MNOTE
  if [ $g = mnist_lr1e-4 ]; then while [ ! -f /root/data/mnist/MNIST_DONE ]; do sleep 2; done; fi
  ev begin $ch $g
  echo $ch $g > $L/current
  python3 -m itlin_core.book.record $ch --preset colab --data /root/data --names $g --no-verify \
      --data-note "$note" --checkpoint-dir /root/ck --results-dir /root/res > $L/$ch-$g.txt 2>&1
  ev end $ch $g rc=$?
done
ev queue-done
touch $L/DONE
