//! Builds IREE's C runtime for the target being built and links it.
//!
//! The sources are the copy of IREE's tree (3.13.0.dev) that the crates.io
//! package `eerie-sys` 0.5.0 carries (`eerie-sys-0.5.0/iree`, fetched by
//! cargo as this crate's build dependency, built with none of its features,
//! so its own build does nothing); `KILN_IREE_SOURCE` names another copy of
//! the same tree. The build runs IREE's CMake (≥ 3.26): `$CMAKE`, a
//! `cmake` on PATH that is new enough, or the pinned PyPI `cmake` package,
//! installed once into kiln's cache folder with the machine's `python3`.
//!
//! The built libraries are kept in kiln's cache folder
//! (`iree-runtime-<key>/`, the key a hash of the source, target, compiler
//! and options), so another profile, `cargo clippy` or a second clone
//! links them without building again; `KILN_IREE_RUNTIME_REBUILD=1`
//! builds anew.
//!
//! Cross builds (`--target aarch64-unknown-linux-gnu`, `armv7-…`) first
//! build IREE's two host tools (`iree-flatcc-cli`, `iree-c-embed-data`)
//! for the host, then the runtime with a CMake toolchain file over the
//! target's C compiler (`CC_<target>`, else Debian's `<triple>-gcc`).

use std::collections::hash_map::DefaultHasher;
use std::env;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package that carries IREE's sources, and its version.
const SOURCE_PACKAGE: &str = "eerie-sys-0.5.0";
/// The PyPI `cmake` used when no CMake ≥ 3.26 is found.
const CMAKE_PIN: &str = "3.31.6";
/// Bumped whenever what is built or how changes (part of the cache key).
const RECIPE: u32 = 1;

const OPTIONS: &[(&str, &str)] = &[
    ("CMAKE_BUILD_TYPE", "Release"),
    ("IREE_BUILD_COMPILER", "OFF"),
    ("IREE_BUILD_TESTS", "OFF"),
    ("IREE_BUILD_SAMPLES", "OFF"),
    // Without it configure fails: third_party/benchmark is not in the tree.
    ("IREE_BUILD_BENCHMARKS", "OFF"),
    ("IREE_BUILD_PYTHON_BINDINGS", "OFF"),
    ("IREE_BUILD_BINDINGS_TFLITE", "OFF"),
    ("IREE_BUILD_BINDINGS_TFLITE_JAVA", "OFF"),
    ("IREE_HAL_DRIVER_DEFAULTS", "OFF"),
    ("IREE_HAL_DRIVER_LOCAL_SYNC", "ON"),
    ("IREE_HAL_DRIVER_LOCAL_TASK", "ON"),
    ("IREE_HAL_EXECUTABLE_LOADER_DEFAULTS", "OFF"),
    ("IREE_HAL_EXECUTABLE_LOADER_EMBEDDED_ELF", "ON"),
    ("IREE_HAL_EXECUTABLE_PLUGIN_DEFAULTS", "OFF"),
    ("IREE_ENABLE_RUNTIME_TRACING", "OFF"),
    // Its CMake downloads sources at configure time.
    ("IREE_ENABLE_LIBBACKTRACE", "OFF"),
    ("IREE_ENABLE_CPUINFO", "OFF"),
    ("CMAKE_POSITION_INDEPENDENT_CODE", "ON"),
];

/// What is built; the runtime API itself is only in the unified library.
const TARGETS: &[&str] = &[
    "iree_runtime_unified",
    "iree_modules_io_parameters_parameters",
    "iree_io_formats_parser_registry",
    "iree_io_parameter_index_provider",
    "iree_hal_utils_file_cache",
    "flatcc_parsing",
];

/// What is linked, in order: the unified runtime plus what it lacks (the
/// parameters module and the parameter-file parsers). None of these
/// defines a symbol the unified library defines.
const LIBS: &[&str] = &[
    "runtime/src/iree/modules/io/parameters/iree_modules_io_parameters_parameters",
    "runtime/src/iree/io/iree_io_parameter_index_provider",
    "runtime/src/iree/io/iree_io_parameter_provider",
    "runtime/src/iree/io/formats/iree_io_formats_parser_registry",
    "runtime/src/iree/io/formats/irpa/iree_io_formats_irpa_irpa",
    "runtime/src/iree/io/formats/gguf/iree_io_formats_gguf_gguf",
    "runtime/src/iree/io/formats/safetensors/iree_io_formats_safetensors_safetensors",
    "runtime/src/iree/io/iree_io_parameter_index",
    "runtime/src/iree/io/iree_io_stream",
    "runtime/src/iree/hal/utils/iree_hal_utils_file_cache",
    "runtime/src/iree/base/internal/iree_base_internal_json",
    "runtime/src/iree/base/internal/iree_base_internal_unicode",
    "runtime/src/iree/runtime/iree_runtime_unified",
    "build_tools/third_party/flatcc/flatcc_parsing",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "KILN_IREE_SOURCE",
        "KILN_IREE_RUNTIME_REBUILD",
        "KILN_CACHE_DIR",
        "XDG_CACHE_HOME",
        "CMAKE",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if env::var("DOCS_RS").is_ok() {
        return;
    }
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let host = env::var("HOST").expect("cargo sets HOST");
    let source = iree_source();
    let cmake = find_cmake();
    let vulkan = vulkan_wanted(&target);
    let local_task = local_task_wanted(&target);
    let cc = target_cc(&target, &host);
    let key = cache_key(&source, &target, &cc, vulkan, local_task);
    let dir = cache_dir().join(format!("iree-runtime-{key}"));
    let done = dir.join("lib/.complete");
    if !done.is_file() || env::var_os("KILN_IREE_RUNTIME_REBUILD").is_some() {
        build(&source, &cmake, &target, &host, &cc, vulkan, &dir);
    }
    // What the Rust side checks before asking for a local-task device.
    println!("cargo:rustc-check-cfg=cfg(kiln_no_local_task)");
    if !local_task {
        println!("cargo:rustc-cfg=kiln_no_local_task");
    }
    let lib = dir.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in LIBS {
        let name = Path::new(l).file_name().unwrap().to_str().unwrap();
        println!("cargo:rustc-link-lib=static={name}");
    }
    for sys in ["pthread", "dl", "m"] {
        println!("cargo:rustc-link-lib=dylib={sys}");
    }
    println!("cargo:rustc-env=KILN_IREE_RUNTIME_DIR={}", dir.display());
}

/// Vulkan on the host and on arm64 (phones); not on armv7, whose phones
/// run the CPU modules.
fn vulkan_wanted(target: &str) -> bool {
    target.starts_with("x86_64") || target.starts_with("aarch64")
}

/// local-task (IREE's threaded CPU driver) on 64-bit targets only: IREE
/// 3.13's local-task command blocks do not build for armv7 (static
/// assertions in `hal/drivers/local_task/block_isa.h` assume 64-bit), so
/// armv7 gets local-sync alone.
fn local_task_wanted(target: &str) -> bool {
    !target.starts_with("armv7")
}

/// IREE's source tree: `KILN_IREE_SOURCE`, else the registry's copy that
/// cargo fetched for the build dependency.
fn iree_source() -> PathBuf {
    if let Some(s) = env::var_os("KILN_IREE_SOURCE") {
        return PathBuf::from(s);
    }
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let mut found = Vec::new();
    for base in [cargo_home.join("registry/src")] {
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let p = e.path().join(SOURCE_PACKAGE).join("iree");
                if p.join("runtime/src/iree/runtime/api.h").is_file() {
                    found.push(p);
                }
            }
        }
    }
    // A vendored copy (`cargo vendor`) sits beside this crate's sources.
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    for up in manifest.ancestors() {
        let p = up.join("vendor/eerie-sys/iree");
        if p.join("runtime/src/iree/runtime/api.h").is_file() {
            found.push(p);
        }
    }
    found.sort();
    found.into_iter().next().unwrap_or_else(|| {
        panic!(
            "kiln-runtime: IREE's runtime sources ({SOURCE_PACKAGE}/iree) are not in {}; \
             run `cargo fetch`, or set KILN_IREE_SOURCE to an IREE 3.13 tree",
            cargo_home.join("registry/src").display()
        )
    })
}

/// kiln's cache folder, by kiln's rule (util::cache_dir).
fn cache_dir() -> PathBuf {
    if let Some(d) = env::var_os("KILN_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("kiln");
    }
    PathBuf::from(env::var_os("HOME").expect("HOME")).join(".cache/kiln")
}

/// `cmake --version`'s (major, minor).
fn cmake_version(cmake: &Path) -> Option<(u32, u32)> {
    let out = Command::new(cmake).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.lines().next()?.rsplit(' ').next()?;
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A CMake ≥ 3.26: `$CMAKE`, PATH's, or the pinned PyPI package in the
/// cache (installed here on first use).
fn find_cmake() -> PathBuf {
    let new_enough = |p: &Path| cmake_version(p).is_some_and(|v| v >= (3, 26));
    if let Some(c) = env::var_os("CMAKE") {
        return PathBuf::from(c);
    }
    if new_enough(Path::new("cmake")) {
        return PathBuf::from("cmake");
    }
    let dir = cache_dir().join(format!("cmake-{CMAKE_PIN}"));
    let bin = dir.join("cmake/data/bin/cmake");
    if new_enough(&bin) {
        return bin;
    }
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-deps",
            "-q",
        ])
        .arg("--target")
        .arg(&partial)
        .arg(format!("cmake=={CMAKE_PIN}"))
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!(
            "kiln-runtime: building IREE's runtime needs CMake >= 3.26; none on PATH, and \
             `python3 -m pip install cmake=={CMAKE_PIN}` failed ({other:?}); set CMAKE"
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).expect("moving the cmake package into place");
    assert!(new_enough(&bin), "{} does not run", bin.display());
    bin
}

/// The target's C compiler: `CC_<target>`, `CC` for a native build, else
/// Debian's cross compiler names.
fn target_cc(target: &str, host: &str) -> String {
    let var = format!("CC_{}", target.replace('-', "_"));
    if let Ok(cc) = env::var(&var) {
        return cc;
    }
    println!("cargo:rerun-if-env-changed={var}");
    if target == host {
        return env::var("CC").unwrap_or_else(|_| "cc".into());
    }
    if target.starts_with("aarch64") {
        "aarch64-linux-gnu-gcc".into()
    } else if target.starts_with("armv7") {
        "arm-linux-gnueabihf-gcc".into()
    } else {
        panic!("kiln-runtime: no C compiler known for {target}; set {var}")
    }
}

fn cache_key(source: &Path, target: &str, cc: &str, vulkan: bool, local_task: bool) -> String {
    let mut h = DefaultHasher::new();
    RECIPE.hash(&mut h);
    std::fs::read_to_string(source.join("runtime/version.json"))
        .unwrap_or_default()
        .hash(&mut h);
    source.hash(&mut h);
    target.hash(&mut h);
    cc.hash(&mut h);
    vulkan.hash(&mut h);
    // Hashed only when off, so the keys of existing builds stay as they were.
    if !local_task {
        "no-local-task".hash(&mut h);
    }
    OPTIONS.hash(&mut h);
    LIBS.hash(&mut h);
    format!("{target}-{:016x}", h.finish())
}

fn jobs() -> String {
    env::var("NUM_JOBS").unwrap_or_else(|_| "2".into())
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("kiln-runtime: {what}: {e}"));
    assert!(status.success(), "kiln-runtime: {what} failed ({status})");
}

/// Configures and builds `targets` of IREE in `build`.
fn cmake_build(
    cmake: &Path,
    source: &Path,
    build: &Path,
    extra: &[String],
    targets: &[&str],
    what: &str,
) {
    std::fs::create_dir_all(build).unwrap();
    let mut configure = Command::new(cmake);
    configure
        .arg("-S")
        .arg(source)
        .arg("-B")
        .arg(build)
        .args(["-G", "Unix Makefiles"]);
    for (k, v) in OPTIONS {
        configure.arg(format!("-D{k}={v}"));
    }
    configure.args(extra);
    run(
        configure.stdout(std::process::Stdio::null()),
        &format!("configuring IREE's {what}"),
    );
    let mut b = Command::new(cmake);
    b.arg("--build").arg(build).args(["-j", &jobs()]);
    for t in targets {
        b.args(["--target", t]);
    }
    run(
        b.stdout(std::process::Stdio::null()),
        &format!("building IREE's {what}"),
    );
}

fn build(
    source: &Path,
    cmake: &Path,
    target: &str,
    host: &str,
    cc: &str,
    vulkan: bool,
    dir: &Path,
) {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let mut extra = vec![
        format!(
            "-DIREE_HAL_DRIVER_VULKAN={}",
            if vulkan { "ON" } else { "OFF" }
        ),
        format!("-DCMAKE_C_COMPILER={cc}"),
        "-DCMAKE_C_FLAGS=-DIREE_ALLOCATOR_SYSTEM_CTL=iree_allocator_libc_ctl".into(),
    ];
    if !local_task_wanted(target) {
        // Overrides OPTIONS' ON (the later -D wins).
        extra.push("-DIREE_HAL_DRIVER_LOCAL_TASK=OFF".into());
    }
    if target != host {
        // The host's code generators first.
        let host_build = out.join("iree-host-tools");
        cmake_build(
            cmake,
            source,
            &host_build,
            &["-DIREE_HAL_DRIVER_VULKAN=OFF".into()],
            &["iree-flatcc-cli", "iree-c-embed-data"],
            "host tools",
        );
        let host_bin = find_file(&host_build, "iree-flatcc-cli")
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .expect("iree-flatcc-cli built");
        let toolchain = out.join("toolchain.cmake");
        let processor = if target.starts_with("aarch64") {
            "aarch64"
        } else {
            "armv7-a"
        };
        let sysroot = if target.starts_with("aarch64") {
            "/usr/aarch64-linux-gnu"
        } else {
            "/usr/arm-linux-gnueabihf"
        };
        std::fs::write(
            &toolchain,
            format!(
                "set(CMAKE_SYSTEM_NAME Linux)\nset(CMAKE_SYSTEM_PROCESSOR {processor})\n\
                 set(CMAKE_C_COMPILER {cc})\nset(CMAKE_CXX_COMPILER {cxx})\n\
                 set(CMAKE_FIND_ROOT_PATH {sysroot})\n\
                 set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)\n\
                 set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)\n\
                 set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)\n",
                cxx = cc.replace("gcc", "g++"),
            ),
        )
        .unwrap();
        extra.push(format!("-DCMAKE_TOOLCHAIN_FILE={}", toolchain.display()));
        extra.push(format!("-DIREE_HOST_BIN_DIR={}", host_bin.display()));
        if target.starts_with("armv7") {
            // 32-bit size_t: a shift in base/alignment.h warns, and IREE
            // builds with -Werror.
            extra.push("-DIREE_ENABLE_WERROR_FLAG=OFF".into());
            extra.push("-DCMAKE_C_FLAGS=-DIREE_ALLOCATOR_SYSTEM_CTL=iree_allocator_libc_ctl -march=armv7-a -mfpu=neon -mfloat-abi=hard".into());
        }
    }
    let build_dir = out.join("iree-runtime");
    cmake_build(cmake, source, &build_dir, &extra, TARGETS, "runtime");
    // Into the cache, whole or not at all.
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(partial.join("lib")).unwrap();
    for l in LIBS {
        let rel = Path::new(l);
        let name = format!("lib{}.a", rel.file_name().unwrap().to_str().unwrap());
        let from = build_dir.join(rel.parent().unwrap()).join(&name);
        std::fs::copy(&from, partial.join("lib").join(&name))
            .unwrap_or_else(|e| panic!("kiln-runtime: {}: {e}", from.display()));
    }
    std::fs::write(partial.join("lib/.complete"), source.display().to_string()).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::rename(&partial, dir).unwrap();
}

fn find_file(root: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                return Some(p);
            }
        }
    }
    None
}
