#!/bin/sh
# mpirun's remote shell for "hosts" that are network namespaces of this machine
# (tests/dist/test_dist_hosts.cpp): `netns_rsh.sh ADDRESS COMMAND...` runs COMMAND, as ssh
# would on the host ADDRESS, inside the namespace that owns ADDRESS. Each host gets a hostname
# of its own (a UTS namespace named like the network namespace): Open MPI tells nodes apart by
# name, and with one name for all it would take them for one node and use shared memory
# between them instead of the network.
#   mpirun --mca plm_rsh_agent tests/dist/netns_rsh.sh --host ADDR_A:1,ADDR_B:1 ...
host=$1
shift
for ns in $(ip netns list | cut -d' ' -f1); do
  if ip -n "$ns" -4 -o addr show | grep -q " inet $host/"; then
    exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
  fi
done
echo "netns_rsh.sh: no network namespace has the address $host" >&2
exit 255
