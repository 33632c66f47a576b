# Sourced by the compile checks: torch_headers VERSION prints a folder holding that torch's
# include/ (torch/include under it), downloading the wheel (~530 MB) into $TORCH_HEADERS_DIR
# (default /tmp/torch-VERSION) the first time.
torch_headers() {
  local version=$1 dir=${TORCH_HEADERS_DIR:-/tmp/torch-$1}
  if [ ! -d "$dir/torch/include" ]; then
    mkdir -p "$dir"
    python3 -m pip download "torch==$version" --no-deps -d "$dir" >/dev/null
    (cd "$dir" && unzip -q -o torch-"$version"-*.whl 'torch/include/*')
  fi
  echo "$dir/torch/include"
}
