#!/usr/bin/env bash
# Run HERE (Debian 12 with apt), not on the GPU machine: downloads the .deb files of the libraries
# ctrainer needs to build and run that the GPU machines lack (they have CUDA, cmake, ninja, gcc
# and PyTorch, but no apt and no network) into .gpu-debs/ at the repository root. Carry that folder
# to the GPU machine and run scripts/gpu/build-and-test.sh there, which unpacks them with dpkg -x
# into a folder of their own (never into /).
#
# What is fetched: the -dev packages that hold headers and link-time .so names (OpenBLAS's OpenMP
# build, jansson, serial HDF5 with its HL library, zlib's headers, and OpenMPI unless --no-mpi),
# and the runtime closure of their libraries (Depends and Pre-Depends, first alternative of each
# "a | b"), minus what every such machine has (glibc, the gcc runtime, zlib, ...) and what we never
# use (compilers behind MPI's wrappers, hwloc's X11/OpenCL plugins, ssh for remote nodes). -dev
# packages are not followed: their own -dev dependencies (libcurl-dev, libssl-dev, ...) only matter
# to someone compiling against those. TensorBoard (protobuf-c) and training curves (cairo, fontconfig)
# are not fetched: build-and-test.sh configures with -DCTRAINER_TENSORBOARD=OFF -DCTRAINER_PLOT=OFF
# (the GPU tests need neither, and their run-time closures would take room in the 64 MiB that travel to the GPU machine).
#
# The -dev packages are repacked without their static libraries (*.a; we link the shared ones),
# which saves about 8 MiB of the 64 MiB that travel to the GPU machine.
#
# Usage: scripts/gpu/fetch-debs.sh [--no-mpi] [--with-data] [--max-mib N]
#   --no-mpi     leave OpenMPI out (the GPU build then uses -DCTRAINER_MPI=OFF: no MPI or NCCL tests)
#   --with-data  add Fashion-MNIST (dataset-fashion-mnist, 30 MiB) for training runs and benchmarks;
#                build-and-test.sh links it to /usr/share/datasets/fashion-mnist where that is free
#   --max-mib N  fail when the .deb files together exceed N MiB (default: what is left of the 64 MiB
#                what travels to the GPU machine besides the working tree, less 2 MiB)
set -euo pipefail

with_mpi=1
with_data=0
max_mib=""
while (($#)); do
  case "$1" in
    --no-mpi) with_mpi=0 ;;
    --with-data) with_data=1 ;;
    --max-mib) max_mib="${2:?--max-mib needs a number}"; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch-debs: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
command -v apt-get >/dev/null && command -v apt-cache >/dev/null ||
  { echo "fetch-debs: needs apt (run it on the Debian 12 development machine, not the GPU machine)" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$root/.gpu-debs"
# Keep the folder out of git without touching .gitignore: .git/info/exclude is local to this clone.
exclude="$(git -C "$root" rev-parse --git-path info/exclude)"
case "$exclude" in /*) ;; *) exclude="$root/$exclude" ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu-debs/' "$exclude" 2>/dev/null || echo '/.gpu-debs/' >>"$exclude"

# Headers and the unversioned .so names the linker wants; not followed (see above).
dev=(libopenblas-openmp-dev libdnnl-dev libjansson-dev libhdf5-dev zlib1g-dev)
# Runtime roots, followed through their dependencies.
runtime=(libopenblas0-openmp libdnnl2 libjansson4 libhdf5-103-1 libhdf5-hl-100 zlib1g)
if ((with_mpi)); then
  dev+=(libopenmpi-dev)
  runtime+=(libopenmpi3 openmpi-bin openmpi-common)
fi

# Every image these machines run has these (an Ubuntu/Debian base with gcc for nvcc), or we never
# need them. zlib1g is a root above on purpose (zlib1g-dev's libz.so points into it) and is skipped
# only as somebody else's dependency.
skip_re='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1|gcc-[0-9]+-base|libstdc\+\+6|libgomp1|libquadmath0|libatomic1|zlib1g|libzstd1|liblzma5|libbz2-1\.0|libselinux1|libpcre2-8-0|libudev1|libsystemd0|libtinfo6|libmd0|libcap2|libcap-ng0|libaudit1|libaudit-common|libpam.*|debconf|dpkg|perl-base|perl|tar|adduser|passwd|debianutils|gcc|gcc-[0-9]+|cpp|cpp-[0-9]+|gfortran.*|flang.*|libhwloc-plugins|openssh-client|libjs-.*)$'

# The dependencies of the packages named: Depends and Pre-Depends, the first alternative of each
# group, a virtual package replaced by its first provider. One apt-cache call per level of the
# search (each call reads the whole package cache, a second or two).
deps_of() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" 2>/dev/null | awk '
      /^  *\|?(Pre)?Depends: / {
        alt = ($1 ~ /^\|/)                  # "|Depends:" = this one or the next line(s)
        name = $2
        if (skipgroup) { skipgroup = alt; next }
        if (name ~ /^</) { want_provider = 1; skipgroup = alt; next }
        print name; skipgroup = alt; want_provider = 0; next
      }
      /^    [^ ]/ { if (want_provider) { print $1; want_provider = 0 } ; next }
      { want_provider = 0; skipgroup = 0 }'
}

declare -A seen=()
for p in "${dev[@]}" "${runtime[@]}"; do seen[$p]=1; done
level=("${runtime[@]}")
while ((${#level[@]})); do
  next=()
  while read -r d; do
    d="${d%%:*}" # libfoo:amd64 -> libfoo
    [[ -z "$d" || -n "${seen[$d]:-}" ]] && continue
    if [[ "$d" =~ $skip_re ]]; then continue; fi
    seen[$d]=1
    next+=("$d")
  done < <(deps_of "${level[@]}")
  level=("${next[@]}")
done
((with_data)) && seen[dataset-fashion-mnist]=1
mapfile -t packages < <(printf '%s\n' "${!seen[@]}" | sort)

rm -rf "$dest"
mkdir -p "$dest"
echo "fetch-debs: downloading ${#packages[@]} packages into $dest"
# apt's sandbox user cannot write into a root-owned folder; download from a scratch folder it owns.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
(cd "$tmp" && apt-get download -q "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
mv "$tmp"/*.deb "$dest"/
missing=()
for p in "${packages[@]}"; do
  compgen -G "$dest/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fetch-debs: could not download: ${missing[*]}" >&2
  exit 1
fi

# Repack the -dev packages without their static libraries.
for p in "${dev[@]}"; do
  f="$(compgen -G "$dest/${p}_*.deb" | head -1)"
  before=$(stat -c %s "$f")
  rm -rf "$tmp/slim"
  dpkg-deb -R "$f" "$tmp/slim"
  find "$tmp/slim" -name '*.a' -delete
  rm -rf "$tmp/slim/usr/share/doc" "$tmp/slim/usr/share/man" "$tmp/slim/DEBIAN/md5sums"
  dpkg-deb --root-owner-group -Zxz -b "$tmp/slim" "$f" >/dev/null
  echo "fetch-debs: $p without static libraries: $((before / 1024)) -> $(($(stat -c %s "$f") / 1024)) KiB"
done

# The GPU machine's glibc must be at least the newest version these libraries ask for.
for f in "$dest"/*.deb; do dpkg -x "$f" "$tmp/x"; done
glibc_needed="$(find "$tmp/x" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0 |
  xargs -0 file -N | awk -F: '/ELF/ {print $1}' | while read -r f; do
    v="$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
    [ -n "$v" ] && echo "$v $(basename "$f")"
  done | sort -V | tail -1 || true)"

printf '%-40s %10s\n' package bytes
for f in "$dest"/*.deb; do printf '%-40s %10s\n' "$(basename "$f" | cut -d_ -f1)" "$(stat -c %s "$f")"; done
total=$(cat "$dest"/*.deb | wc -c)
echo "fetch-debs: ${#packages[@]} packages, $((total / 1024)) KiB ($(awk -v b="$total" 'BEGIN{printf "%.1f", b/1048576}') MiB)" \
     "in $dest; newest glibc symbol needed: ${glibc_needed:-none}; OpenMPI: $([ $with_mpi = 1 ] && echo yes || echo no)"
# What else travels: tracked and untracked-but-not-ignored files (and shared/, if the checkout has one).
tree=$(cd "$root" && { git ls-files -z -co --exclude-standard; if [ -d shared ]; then find shared -type f -print0; fi; } |
  xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}' || true)
[[ -n "$max_mib" ]] || max_mib=$(((64 * 1048576 - tree) / 1048576 - 2))
echo "fetch-debs: the working tree that travels with them: $((tree / 1024)) KiB; limit for the .debs: $max_mib MiB"
if ((total > max_mib * 1048576)); then
  echo "fetch-debs: more than $max_mib MiB; try --no-mpi or leave out --with-data (64 MiB travel to the GPU machine in all)" >&2
  exit 1
fi
