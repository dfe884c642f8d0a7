#!/bin/sh
# GB10: the driver wants the KV slab as truly free pages and does not reclaim page cache, which
# a 182 GiB shard read has just filled (NVRM: NV_ERR_NO_MEMORY while "available" looks fine).
# Run beside every model load: drop clean page cache every few seconds until the load is done.
set -eu
if [ "${1:-}" = "--check" ]; then
    test -r /proc/meminfo && echo "cache-flusher: ok"
    exit 0
fi
interval="${GLM53_FLUSH_INTERVAL:-5}"
while :; do
    sync
    echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
    grep -E '^(MemFree|Cached):' /proc/meminfo
    sleep "$interval"
done
