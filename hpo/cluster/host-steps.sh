# hpo runs inside the container; srun runs here, on the host, with the host's Slurm. hpo
# asks for each step it starts (each node's Ray) through a folder only this job sees: N.args
# holds the srun command (NUL-separated words), N on the requests pipe says it is there; the
# step's pid goes to N.pid and its exit status to N.rc.
export HPO_HOST_STEPS="$(mktemp -d "${TMPDIR:-/tmp}/hpo-steps.XXXXXX")"
mkfifo -m 0600 "$HPO_HOST_STEPS/requests"
hpo_host_steps() {
  local n args
  exec 3<>"$HPO_HOST_STEPS/requests"
  while read -r -u 3 n; do
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    mapfile -d '' -t args < "$HPO_HOST_STEPS/$n.args"
    [ "${args[0]}" = srun ] || continue  # steps only, nothing else
    (
      "${args[@]}" </dev/null 3<&- &
      echo "$!" > "$HPO_HOST_STEPS/$n.pid.new" && mv "$HPO_HOST_STEPS/$n.pid.new" "$HPO_HOST_STEPS/$n.pid"
      wait "$!"
      echo "$?" > "$HPO_HOST_STEPS/$n.rc.new" && mv "$HPO_HOST_STEPS/$n.rc.new" "$HPO_HOST_STEPS/$n.rc"
    ) 3<&- &
  done
}
hpo_host_steps &
hpo_steps_pid=$!
trap 'kill "$hpo_steps_pid" 2>/dev/null; rm -rf "$HPO_HOST_STEPS"' EXIT
