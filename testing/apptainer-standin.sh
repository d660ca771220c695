#!/bin/bash
# A stand-in for `apptainer exec` (and `singularity exec`) on the test cluster; see
# testing/container_standin.py. Apptainer's form: apptainer exec [exec options...] <image>
# <command>. The image is a folder whose .standin-image lists the host paths it holds (the OS
# and the Python environment, read-only); inside, only those and the binds exist: Apptainer's
# default binds (/proc, /sys, /dev, /tmp, /var/tmp, $HOME, the current folder, /etc/hosts,
# /etc/passwd, /etc/group) and each --bind. Slurm's commands are not in it. Entered with
# unshare (a private mount namespace, nothing else: PID and network stay the host's, as under
# Apptainer) and chroot. Runs as root.
set -euo pipefail
die() { echo "FATAL:   $*" >&2; exit 255; }

if [ -z "${_HPO_STANDIN_NS:-}" ]; then
  _HPO_STANDIN_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
unset _HPO_STANDIN_NS

[ "${1:-}" = exec ] || die "this stand-in knows: $(basename "$0") exec [options] <image> <command>"
shift
binds=() envs=() clean=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nv|--rocm) shift ;;  # no GPUs here: accepted as Apptainer accepts them
    -B|--bind) [ $# -ge 2 ] || die "$1 needs a value"; binds+=("$2"); shift 2 ;;
    --bind=*) binds+=("${1#--bind=}"); shift ;;
    --env) [ $# -ge 2 ] || die "--env needs a value"; envs+=("$2"); shift 2 ;;
    -e|--cleanenv) clean=1; shift ;;
    -*) die "unknown exec option $1" ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || die "expected <image> <command>"
image=$1; shift
[ -f "$image/.standin-image" ] || die "could not open image $image: not a stand-in image"

root="$image/.root"
mount -t tmpfs -o mode=0755 hpo-standin "$root"
place() {  # place SRC [DST [ro|rw]]: SRC (a host path) at DST inside
  local src=$1 dst=${2:-$1} opt=${3:-rw}
  [ -e "$src" ] || die "mount source $src does not exist"
  if [ -L "$src" ] && [ "$dst" = "$src" ] && [ "$opt" = ro ]; then  # /bin -> usr/bin
    mkdir -p "$(dirname "$root$dst")"; ln -sfn "$(readlink "$src")" "$root$dst"; return
  fi
  if [ -d "$src" ]; then mkdir -p "$root$dst"
  else mkdir -p "$(dirname "$root$dst")"; [ -e "$root$dst" ] || touch "$root$dst"; fi
  mount --rbind "$src" "$root$dst"
  if [ "$opt" = ro ]; then mount -o remount,bind,ro "$root$dst"; fi
}
while IFS= read -r held; do [ -n "$held" ] && place "$held" "$held" ro; done < "$image/.standin-image"
# Slurm's client commands are not in the image, however much of the host's OS it holds
for cmd in srun sbatch salloc scontrol squeue scancel sinfo; do
  for dir in /usr/bin /usr/local/bin; do
    if [ -e "$root$dir/$cmd" ]; then
      mount --bind /dev/null "$root$dir/$cmd"
    fi
  done
done
for default in /proc /sys /dev /tmp /var/tmp "$HOME" "$PWD" /etc/hosts /etc/passwd /etc/group; do
  [ -e "$default" ] && place "$default"
done
for spec in "${binds[@]}"; do
  IFS=: read -r src dst opt <<< "$spec"
  place "$src" "${dst:-$src}" "${opt:-rw}"
done

# Variables: the host's pass through (unless --cleanenv); APPTAINERENV_X and SINGULARITYENV_X
# set X inside, and --env K=V sets K (over both).
inside=()
while IFS= read -r -d '' pair; do
  name=${pair%%=*}
  case "$name" in
    APPTAINERENV_*|SINGULARITYENV_*) inside+=("${name#*ENV_}=${pair#*=}") ;;
  esac
done < <(env -0)
inside+=("${envs[@]}")
start=(env)
if [ "$clean" = 1 ]; then start=(env -i "HOME=$HOME" "TERM=${TERM:-dumb}" "PATH=/usr/local/bin:/usr/bin:/bin"); fi
here=$PWD
exec chroot "$root" "${start[@]}" "${inside[@]}" /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$here" "$@"
