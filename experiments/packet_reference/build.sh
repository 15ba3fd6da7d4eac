#!/usr/bin/env bash
# Builds the packet-level reference (experiments/packet_reference/fabric_ref.cc) against
# ns-3 3.44 from its pip wheel (the project's optional extra: pip install -e ".[packet]").
# Fetches nothing itself: if the wheel is missing it says how to install it and exits 2.
# Output: experiments/packet_reference/build/fabric_ref (git-ignored).
#
#   bash experiments/packet_reference/build.sh            # uses the python on PATH
#   PYTHON=/path/to/venv/bin/python bash experiments/packet_reference/build.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python}"
ns3_dir="$("$py" - <<'EOF'
import importlib.util, os, sys
spec = importlib.util.find_spec("ns3")
if spec is None or not spec.submodule_search_locations:
    sys.exit(0)
print(list(spec.submodule_search_locations)[0])
EOF
)"
if [ -z "$ns3_dir" ] || [ ! -d "$ns3_dir/include/ns3" ]; then
  echo "build.sh: ns-3 is not installed for $py; install the pinned wheel with" >&2
  echo "  pip install -e \".[packet]\"   (ns3==3.44.post0, ~520 MB, ~2 min)" >&2
  exit 2
fi
version="$("$py" -c 'import importlib.metadata as m; print(m.version("ns3"))')"
case "$version" in
  3.44*) ;;
  *) echo "build.sh: ns3 $version found; the reference is pinned to 3.44 (pip install ns3==3.44.post0)" >&2; exit 2;;
esac
mkdir -p "$here/build"
libs=""
for m in core network internet point-to-point applications traffic-control; do
  libs="$libs -lns3.44-$m"
done
"${CXX:-g++}" -std=c++20 -O2 -DNS3_LOG_ENABLE=0 -I"$ns3_dir/include" "$here/fabric_ref.cc" \
  -o "$here/build/fabric_ref" -L"$ns3_dir/lib64" $libs -Wl,-rpath,"$ns3_dir/lib64"
echo "$here/build/fabric_ref (ns3 $version)"
