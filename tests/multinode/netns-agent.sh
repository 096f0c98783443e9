#!/bin/sh
# netns-agent.sh: OpenMPI's launch agent for hosts that are network namespaces on this machine
# (tests/multinode.sh), in place of ssh: `mpirun --mca plm_rsh_agent netns-agent.sh` calls it as
# `netns-agent.sh [options] HOST COMMAND...`, and it runs COMMAND inside the namespace that
# LWOPT_NETNS_HOSTS ("ADDRESS=NAMESPACE ...", in mpirun's environment) names for HOST.
# Like ssh it joins COMMAND into one string for a shell (OpenMPI quotes its arguments for that)
# and starts it with a clean environment, so the ranks see only what mpirun sends them (-x).
# It does not start anything outside those namespaces: an unknown host is an error.
while [ $# -gt 0 ]; do
    case $1 in
        -*) shift ;; # ssh-style options OpenMPI may add
        *) break ;;
    esac
done
host=$1
shift
ns=
for pair in $LWOPT_NETNS_HOSTS; do
    [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
if [ -z "$ns" ]; then
    echo "netns-agent.sh: no namespace for host '$host'" \
        "in LWOPT_NETNS_HOSTS='$LWOPT_NETNS_HOSTS'" >&2
    exit 1
fi
exec ip netns exec "$ns" env -i PATH="$PATH" HOME="${HOME:-/}" sh -c "$*"
