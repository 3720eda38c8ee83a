#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds (default 600), one after another, with the
# memory caps of fuzz/README.md; logs go to fuzz/logs/<target>.log.
set -u
cd "$(dirname "$0")"
secs=${1:-600}
mkdir -p logs
for t in torch_ckpt npy safetensors_audited idx cifar vq_config image_header vq_family_config \
    parquet_source tar_source token_shard gpt_config family_config hub_listing; do
    cargo +nightly fuzz run -O "$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
        -max_len=65536 -print_final_stats=1 >"logs/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^stat::number_of_executed_units' "logs/$t.log")"
done
