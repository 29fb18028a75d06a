# Sourced by the benchmark scripts (bash).
#
# cg_sum FILE: for each function named post_op, post_recv or poll_cq (any instance), its calls
# and the inclusive instructions of those calls, from a callgrind output file (two passes: a
# name may be defined after its first use; plain awk: the guest runs the host's /usr through
# 9p, where some of python's libraries fail to load).
cg_sum() {
    awk '
        function short(n, s) { s = n; sub(/<.*/, "", s); sub(/.*::/, "", s); sub(/[\047.].*/, "", s); return s }
        /^c?fn=\(/ {
            i = index($0, "("); j = index($0, ")"); id = substr($0, i + 1, j - i - 1)
            rest = substr($0, j + 2)
            if (rest != "") names[id] = rest
            if (NR != FNR && $0 ~ /^cfn=/) callee = names[id]
            next
        }
        NR == FNR { next }
        /^calls=/ { split($0, a, /[= ]/); pend = 1; n = a[2]; next }
        pend && /^[0-9+*-]/ {
            pend = 0; k = short(callee)
            if (k == "post_op" || k == "post_recv" || k == "poll_cq") { calls[k] += n; incl[k] += $NF }
        }
        END { for (k in calls) print k, calls[k], incl[k] }
    ' "$1" "$1"
}
