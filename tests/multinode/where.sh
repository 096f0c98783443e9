#!/bin/sh
# where.sh DIR COMMAND...: records where this MPI rank runs, as DIR/rank.N (N: its rank in
# MPI_COMM_WORLD) holding "net:[INODE] ADDRESSES" (its network namespace and that namespace's
# addresses), then runs COMMAND in its place. A fixture of tests/multinode.sh.
dir=$1
shift
rank=${OMPI_COMM_WORLD_RANK:?where.sh: not started by mpirun}
echo "$(readlink /proc/self/ns/net) $(hostname -I)" >"$dir/rank.$rank"
exec "$@"
