set -e
cd /work/wt/grpc
D=$(mktemp -d)
.venv/bin/python -m pocketmq serve --data-dir $D/data --port 0 --grpc-port 0 --namesrv-port 0 > $D/out 2>$D/err &
BPID=$!
for i in $(seq 50); do grep -q ready $D/out && break; sleep 0.1; done
GRPC=$(sed -E 's/.*grpc=([^ ]+).*/\1/' $D/out)
NATIVE=$(sed -E 's/.*native=([^ ]+).*/\1/' $D/out)
.venv/bin/pocketmq topic create bench --queues 8 --server $NATIVE >/dev/null 2>&1 || .venv/bin/python -c "
from pocketmq.client.sync import SyncAdmin; a=SyncAdmin(servers='$NATIVE'); a.create_topic('bench', queues=8); a.close()"
.venv/bin/py-spy record -p $BPID -o /tmp/prof/broker.txt -f raw -d 12 --nonblocking > /dev/null 2>&1 &
SPY=$!
.venv/bin/python /tmp/prof/load.py $GRPC 20000
wait $SPY || true
kill $BPID; wait $BPID || true
