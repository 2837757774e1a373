#!/bin/bash
# A recording stand-in for docker that behaves like it where the job scripts depend on it: a container
# is a process *outside* the task's process tree (as containerd's are), so it outlives a killed
# `docker run` client; `--rm` removes it when it exits; a name in use is refused; `rm --force`,
# `kill --signal`, `ps --all --quiet --filter label=...` work on names. As with docker, `--rm` is the
# daemon's work: the container goes when its program ends, even if the client was killed first.
# State: $FAKE_DOCKER_STATE, one directory per container (pid, node, user, label), exit statuses by
# container pid in exits/; every call is appended to calls.log.
set -u
state=${FAKE_DOCKER_STATE:?}
mkdir -p "$state/containers" "$state/exits"
printf '%s %s\n' "${SLURMD_NODENAME:-?}" "$*" >> "$state/calls.log"

container_pid() { cat "$state/containers/$1/pid" 2>/dev/null; }

remove() {  # remove NAME: kill what runs in it, forget it (once: whoever moves it away first)
  local pid gone=$state/removing-$1-$$
  pid=$(container_pid "$1")
  mv "$state/containers/$1" "$gone" 2>/dev/null || return 1
  printf 'removed %s\n' "$1" >> "$state/events.log"
  rm -rf "${gone:?}"
  if [[ -n $pid ]]; then kill -KILL -- "-$pid" 2>/dev/null; fi
}

command=$1
shift
case $command in
  run)
    name= user=root label= rm=
    while [[ $# -gt 0 && $1 == -* ]]; do
      case $1 in
        --name) name=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --label) label=$2; shift 2 ;;
        --rm) rm=1; shift ;;
        --) shift; break ;;  # the end of options: the image follows
        --network|--ipc|--ulimit|--gpus|--device|--volume|--workdir|--env|-e|-v|-w) shift 2 ;;
        *) shift ;;
      esac
    done
    shift  # the image
    if [[ -z $name ]]; then name=anonymous-$$; fi
    if [[ -d $state/containers/$name ]]; then
      echo "docker: Error response from daemon: Conflict. The container name \"/$name\" is already in use." >&2
      exit 125
    fi
    dir=$state/containers/$name
    mkdir -p "$dir"
    printf '%s' "${SLURMD_NODENAME:-?}" > "$dir/node"
    printf '%s' "$user" > "$dir/user"
    printf '%s' "$label" > "$dir/label"
    printf 'started %s on %s as %s\n' "$name" "${SLURMD_NODENAME:-?}" "$user" >> "$state/events.log"
    # The container: its own session, re-parented away from this client (double fork), with signals as
    # a fresh process has them (not as the client inherited them), and an init that passes
    # TERM/USR1/USR2 on to the program and, with --rm, removes the container when the program ends.
    (env --default-signal setsid bash -c "$(declare -f container_pid remove)"'
      state=$1 name=$2 rm=$3; shift 3
      echo $$ > "$state/containers/$name/pid"
      for sig in TERM USR1 USR2; do trap "kill -$sig \$child 2>/dev/null" "$sig"; done
      "$@" &
      child=$!
      while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
      echo "$status" > "$state/exits/$$"
      if [[ -n $rm ]]; then remove "$name"; fi
    ' init "$state" "$name" "$rm" "$@" </dev/null >>"$dir/output" 2>&1 &)
    until [[ -s $dir/pid ]]; do sleep 0.05; done
    pid=$(container_pid "$name")
    # The container's output as it comes (as docker's attached client shows it), kept if it is removed.
    tail --lines=+1 --follow --pid="$pid" "$dir/output" 2>/dev/null &
    tailer=$!
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    status=$(cat "$state/exits/$pid" 2>/dev/null || echo 137)
    wait "$tailer"
    if [[ -n $rm && -d $dir ]]; then remove "$name"; fi
    exit "$status"
    ;;
  rm)
    [[ ${1:-} == --force || ${1:-} == -f ]] && shift
    for name in "$@"; do remove "$name"; done
    exit 0
    ;;
  kill)
    signal=KILL
    if [[ ${1:-} == --signal=* ]]; then signal=${1#--signal=}; shift; fi
    pid=$(container_pid "$1")
    [[ -n $pid ]] && kill "-$signal" "$pid"
    exit
    ;;
  ps)
    filter=
    while [[ $# -gt 0 ]]; do
      case $1 in
        --filter) filter=${2#label=}; shift 2 ;;
        *) shift ;;
      esac
    done
    for dir in "$state"/containers/*/; do
      [[ -d $dir ]] || continue
      if [[ -z $filter || $(cat "$dir/label") == "$filter" ]]; then basename "$dir"; fi
    done
    exit 0
    ;;
  login|pull) exit 0 ;;
  *) echo "fake docker: no $command" >&2; exit 2 ;;
esac
