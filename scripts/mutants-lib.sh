# Sourced by mutants.sh and mutants-text.sh.

# The counts of a group whose outcomes are listed in
# <dir>/{caught,missed,timeout,unviable}.txt (a mutant per line that does
# not start with a space), and the caught share of the viable ones.
mutants_summary() { # dir
    local d=$1 caught missed unviable timeouts viable pct
    # grep -c prints 0 (and fails) for an empty list.
    count() { if [ -f "$d/$1.txt" ]; then grep -c '^[^ ]' "$d/$1.txt" || true; else echo 0; fi; }
    caught=$(count caught) missed=$(count missed) unviable=$(count unviable) timeouts=$(count timeout)
    viable=$((caught + missed + timeouts))
    pct=$([ "$viable" -gt 0 ] && echo "$((100 * (caught + timeouts) / viable))%" || echo "-")
    echo "caught $caught, missed $missed, timeout $timeouts, unviable $unviable; caught (with timeouts) $pct"
}
