# step SECONDS CMD...: run CMD in a new process group and kill the whole group (-9) after SECONDS,
# and whatever it left behind when it ends: no spinning kernel outlives a step. (Sourced.)
step() {
    local limit=$1; shift
    setsid "$@" &
    local pg=$! t=0
    while kill -0 "$pg" 2>/dev/null; do
        sleep 1; t=$((t + 1))
        if [ "$t" -ge "$limit" ]; then echo "step timed out after ${limit}s: killing group $pg"; kill -9 -- "-$pg"; break; fi
    done
    wait "$pg" 2>/dev/null
    kill -9 -- "-$pg" 2>/dev/null
    return 0
}
