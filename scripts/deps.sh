# Sourced by test.sh and demo.sh: installs the Debian 12 packages stoker needs that are missing
# (as root it runs `apt-get update` first, then installs; otherwise it prints the command to run),
# then the npm packages of the tests (scripts/npm_deps.sh: s3rver into .deps/npm).
# STOKER_EXTRA_PACKAGES adds packages (space-separated).

stoker_required_packages=(
  build-essential cmake pkg-config
  libfmt-dev libspdlog-dev catch2 libhwloc-dev
  libjpeg62-turbo-dev libpng-dev libwebp-dev  # stoker::vision (JPEG, PNG, WebP)
  libsleef-dev                  # GaussianBlur's kernel with torch's exponential (optional)
  libturbojpeg0-dev             # the image tests write JPEGs with TurboJPEG
  zlib1g-dev libzstd-dev nlohmann-json3-dev  # TFRecord (gzip) and MDS readers
  libbz2-dev libbrotli-dev libssl-dev libxxhash-dev  # MDS bz2/br shards and shard hashes
  zstd                          # the MDS tests write zstd-compressed shards
  dataset-fashion-mnist         # the MnistDataset test on real files (skipped when absent)
  openmpi-bin                   # the mpirun test of DistributedSampler::from_env
  libopenmpi-dev                # the mpirun equal-batches test of record shards (MPI_Allreduce)
  libarchive-dev                # compressed record shards (.tar.gz, .tar.zst)
  libcurl4-openssl-dev libexpat1-dev  # remote shards: HTTP(S) transport, S3's XML answers
  nginx openssl                 # the remote tests' HTTP(S) server and its test certificate
  python3-botocore              # the SigV4 test's oracle (signs the same requests)
  python3-numpy  # tests cross-check .npy files written by NumPy
  python3-pil python3-torchvision  # the vision parity tests compare with torchvision
  pybind11-dev python3-dev python3-pytest python3-torch  # the Python package (python/), its tests
  libtorch-dev   # examples/libtorch_interop and dlpack_layout_check (skipped when absent)
  clang libclang-rt-14-dev  # the libFuzzer targets, scripts/fuzz.sh (skipped when absent)
)

stoker_install_deps() {
  stoker_install_debian_deps
  # s3rver for the remote tests, from npm (after apt: it needs npm).
  "$(dirname "${BASH_SOURCE[0]}")/npm_deps.sh"
}

stoker_install_debian_deps() {
  local wanted=("${stoker_required_packages[@]}")
  if [ -n "${STOKER_EXTRA_PACKAGES:-}" ]; then
    read -r -a extra <<<"$STOKER_EXTRA_PACKAGES"
    wanted+=("${extra[@]}")
  fi
  local missing=()
  local pkg
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "stoker: installing missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "stoker: not root; run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
