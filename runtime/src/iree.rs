//! Safe owners over IREE's C runtime: an [`Instance`] with one device, a
//! [`Session`] holding the parameter providers and one bytecode module, the
//! [`Function`]s it exports, and [`Tensor`]s (buffer views) living on the
//! device. Every raw pointer lives in one owning type whose `Drop` releases
//! it; every C status becomes an [`Error`] with IREE's message kept.

use crate::ffi;
use crate::{Error, Result};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex};

/// Turns a C status into a result, freeing the status.
fn check(status: ffi::iree_status_t, during: &str) -> Result<()> {
    if status.is_null() {
        return Ok(());
    }
    let code = (status as usize) & ffi::IREE_STATUS_CODE_MASK;
    let mut buf = vec![0u8; 4096];
    let mut len = 0usize;
    // SAFETY: status is a live, non-OK status; the buffer is writable.
    let message = unsafe {
        if ffi::iree_status_format(status, buf.len(), buf.as_mut_ptr().cast(), &mut len) {
            String::from_utf8_lossy(&buf[..len.min(buf.len())]).into_owned()
        } else {
            format!("IREE status code {code}")
        }
    };
    // SAFETY: the status is owned here and freed once.
    unsafe { ffi::iree_status_free(status) };
    Err(Error::Iree {
        during: during.to_string(),
        message: one_line(&message),
    })
}

/// IREE's message on one line, the cause first: IREE appends its
/// annotations ("; while invoking ...") after the cause already.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The device a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// IREE's CPU device on the calling thread.
    LocalSync,
    /// IREE's CPU device with a pool of worker threads (the default).
    #[default]
    LocalTask,
    /// A Vulkan device (the first one the loader lists).
    Vulkan,
}

impl Device {
    /// IREE's driver name.
    pub fn driver(self) -> &'static str {
        match self {
            Device::LocalSync => "local-sync",
            Device::LocalTask => "local-task",
            Device::Vulkan => "vulkan",
        }
    }

    /// The device of a driver name (`local-task`, `local-sync`, `vulkan`).
    pub fn from_name(name: &str) -> Option<Device> {
        match name {
            "local-sync" => Some(Device::LocalSync),
            "local-task" => Some(Device::LocalTask),
            "vulkan" => Some(Device::Vulkan),
            _ => None,
        }
    }
}

/// How a parameter file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamMode {
    /// Mapped into memory: on a CPU device the module reads the pages in
    /// place, so only the pages it touches are resident.
    Map,
    /// Read through the platform's file API into device memory, as
    /// `iree-run-module --parameter_mode=file` does.
    File,
    /// [`ParamMode::Map`], unless the module reads row chunks of the
    /// archive as slices: an archive with chunk entries (`KEY@OFFSET`, what
    /// kiln writes for a tensor past IREE's size bound) none of which the
    /// module names. IREE 3.13 reads such a slice of a mapped file from the
    /// entry's start, so then [`ParamMode::File`].
    Auto,
}

/// One parameter file and the scope a module names it by.
#[derive(Debug, Clone)]
pub struct ParamFile {
    /// The scope (`model`, or `packed` for `kiln compile --pack`'s archive).
    pub scope: String,
    /// The file (`.irpa`, `.gguf` or `.safetensors`).
    pub path: PathBuf,
    /// How it is opened.
    pub mode: ParamMode,
}

impl ParamFile {
    /// `path` under `scope`, opened in `mode`.
    pub fn new(scope: impl Into<String>, path: impl Into<PathBuf>, mode: ParamMode) -> ParamFile {
        ParamFile {
            scope: scope.into(),
            path: path.into(),
            mode,
        }
    }
}

/// What a session is opened with: the device, its workers and the
/// parameter files.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SessionOptions {
    /// The device.
    pub device: Device,
    /// local-task worker groups (`None` or 0: IREE's detection).
    pub task_groups: Option<usize>,
    /// The parameter files, one provider per scope.
    pub params: Vec<ParamFile>,
    /// Run IREE's threads under Linux's `SCHED_BATCH` policy (the default):
    /// the caller's wait on a call's fence then no longer preempts the
    /// worker that signalled it (spec/iree.md).
    pub sched_batch: bool,
}

impl SessionOptions {
    /// `device`, IREE's worker detection, no parameters, `SCHED_BATCH` on.
    pub fn new(device: Device) -> SessionOptions {
        SessionOptions {
            device,
            task_groups: None,
            params: Vec::new(),
            sched_batch: true,
        }
    }

    /// Sets the local-task worker groups.
    pub fn task_groups(mut self, groups: impl Into<Option<usize>>) -> Self {
        self.task_groups = groups.into();
        self
    }

    /// Adds a parameter file.
    pub fn param(mut self, file: ParamFile) -> Self {
        self.params.push(file);
        self
    }

    /// Sets whether IREE's threads run under `SCHED_BATCH`.
    pub fn sched_batch(mut self, on: bool) -> Self {
        self.sched_batch = on;
        self
    }
}

/// IREE's flags are process-wide: one device is created at a time, after
/// its worker count is parsed into them.
static DEVICE_LOCK: Mutex<()> = Mutex::new(());

/// Sets `--task_topology_group_count` (0: IREE's detection).
fn set_task_groups(groups: usize) -> Result<()> {
    let args = [
        CString::new("kiln").expect("no NUL"),
        CString::new(format!("--task_topology_group_count={groups}")).expect("no NUL"),
    ];
    let mut ptrs: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    let mut argc = ptrs.len() as c_int;
    let mut argv = ptrs.as_mut_ptr();
    // SAFETY: argv points at argc NUL-terminated strings that outlive the
    // call; the parser only reorders the pointer array.
    check(
        unsafe { ffi::iree_flags_parse(0, &mut argc, &mut argv) },
        "setting the worker count",
    )
}

/// Applies `SCHED_BATCH` to the calling thread; threads it starts inherit
/// it. Nothing happens where the policy does not exist.
fn set_sched_batch() {
    #[cfg(target_os = "linux")]
    // SAFETY: sched_setscheduler reads a valid sched_param.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        let _ = libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
    }
}

/// An IREE runtime instance and the one device a session runs on.
struct Instance {
    instance: *mut ffi::iree_runtime_instance_t,
    device: *mut ffi::iree_hal_device_t,
}

impl Instance {
    fn create(options: &SessionOptions) -> Result<Instance> {
        // The build script leaves local-task out where IREE's does not
        // build it (armv7): say so rather than "driver not found".
        #[cfg(kiln_no_local_task)]
        if options.device == Device::LocalTask {
            return Err(Error::Iree {
                during: "creating the local-task device".into(),
                message: "this kiln-runtime was built without local-task (IREE 3.13's local-task \
                          does not build for 32-bit targets such as armv7); use local-sync"
                    .into(),
            });
        }
        let mut inst_options = ffi::iree_runtime_instance_options_t {
            driver_registry: ptr::null_mut(),
        };
        let mut me = Instance {
            instance: ptr::null_mut(),
            device: ptr::null_mut(),
        };
        // SAFETY: out-pointers are valid; on failure `me` drops what exists.
        unsafe {
            ffi::iree_runtime_instance_options_initialize(&mut inst_options);
            ffi::iree_runtime_instance_options_use_all_available_drivers(&mut inst_options);
            check(
                ffi::iree_runtime_instance_create(
                    &inst_options,
                    ffi::allocator_system(),
                    &mut me.instance,
                ),
                "creating the IREE instance",
            )?;
        }
        let _guard = DEVICE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if options.device == Device::LocalTask {
            set_task_groups(options.task_groups.unwrap_or(0))?;
        }
        if options.sched_batch {
            set_sched_batch();
        }
        let driver = options.device.driver();
        // SAFETY: the instance is live; out-pointer valid.
        unsafe {
            check(
                ffi::iree_runtime_instance_try_create_default_device(
                    me.instance,
                    ffi::iree_string_view_t::of(driver),
                    &mut me.device,
                ),
                &format!("creating the {driver} device"),
            )?;
        }
        Ok(me)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: each pointer is owned here and released once.
        unsafe {
            if !self.device.is_null() {
                ffi::iree_hal_device_release(self.device);
            }
            if !self.instance.is_null() {
                ffi::iree_runtime_instance_release(self.instance);
            }
        }
    }
}

/// A parameter file mapped into memory for IREE: the mapping lives as
/// long as the session that reads it.
struct Mapped {
    _map: memmap2::Mmap,
}

/// What a session owns: the IREE session, its instance and device, the
/// module's bytes and the mapped parameter files. Shared by the
/// [`Session`] and every [`Tensor`] it made, so no buffer outlives the
/// device that holds it.
struct Core {
    // Field order is drop order: the session before the device, the
    // mappings last.
    session: *mut ffi::iree_runtime_session_t,
    instance: Instance,
    _module_bytes: memmap2::Mmap,
    _mapped: Vec<Mapped>,
    device_kind: Device,
    module_name: String,
}

// SAFETY: an IREE session is called from one thread at a time (`&mut
// Session` for calls); IREE's objects are reference counted with atomics.
unsafe impl Send for Core {}
// SAFETY: shared only to keep the device alive and to read buffers, which
// IREE allows from any thread.
unsafe impl Sync for Core {}

/// A loaded module over its parameters on one device.
pub struct Session {
    core: Arc<Core>,
}

impl Session {
    /// Loads `module` (a `.vmfb`) on `options.device` over the parameter
    /// files of `options.params`.
    pub fn open(module: &Path, options: &SessionOptions) -> Result<Session> {
        Ok(Session {
            core: Arc::new(Core::open(module, options)?),
        })
    }
}

impl Core {
    fn open(module: &Path, options: &SessionOptions) -> Result<Core> {
        let instance = Instance::create(options)?;
        let file = std::fs::File::open(module).map_err(|source| Error::Io {
            path: module.to_path_buf(),
            source,
        })?;
        // SAFETY: the module file is mapped read-only; kiln never writes a
        // module in place (writes go to a temporary file and a rename).
        let module_bytes = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
            path: module.to_path_buf(),
            source,
        })?;
        let mut me = Core {
            session: ptr::null_mut(),
            instance,
            _module_bytes: module_bytes,
            _mapped: Vec::new(),
            device_kind: options.device,
            module_name: String::new(),
        };
        let mut session_options = ffi::iree_runtime_session_options_t {
            context_flags: 0,
            builtin_modules: 0,
        };
        // SAFETY: the instance and device are live; out-pointers valid.
        unsafe {
            ffi::iree_runtime_session_options_initialize(&mut session_options);
            check(
                ffi::iree_runtime_session_create_with_device(
                    me.instance.instance,
                    &session_options,
                    me.instance.device,
                    ffi::allocator_system(),
                    &mut me.session,
                ),
                "creating the session",
            )?;
        }
        if !options.params.is_empty() {
            me.append_parameters(&options.params)?;
        }
        let span = ffi::iree_const_byte_span_t {
            data: me._module_bytes.as_ptr(),
            data_length: me._module_bytes.len(),
        };
        let during = format!("loading {}", module.display());
        let mut vm_module = ptr::null_mut();
        // SAFETY: the mapping outlives the session (field order); the null
        // allocator leaves it to us. The session retains the module.
        unsafe {
            check(
                ffi::iree_vm_bytecode_module_create(
                    ffi::iree_runtime_instance_vm_instance(me.instance.instance),
                    0,
                    span,
                    ffi::allocator_null(),
                    ffi::allocator_system(),
                    &mut vm_module,
                ),
                &during,
            )?;
            me.module_name = ffi::iree_vm_module_name(vm_module).to_string();
            let appended = check(
                ffi::iree_runtime_session_append_module(me.session, vm_module),
                &during,
            );
            ffi::iree_vm_module_release(vm_module);
            appended?;
        }
        Ok(me)
    }

    fn append_parameters(&mut self, files: &[ParamFile]) -> Result<()> {
        let alloc = ffi::allocator_system();
        let mut providers: Vec<*mut ffi::iree_io_parameter_provider_t> = Vec::new();
        let result = (|| -> Result<()> {
            let mut scopes: Vec<&str> = files.iter().map(|f| f.scope.as_str()).collect();
            scopes.dedup();
            for scope in scopes {
                let mut index = ptr::null_mut();
                // SAFETY: out-pointer valid.
                unsafe {
                    check(
                        ffi::iree_io_parameter_index_create(alloc, &mut index),
                        "creating a parameter index",
                    )?;
                }
                let indexed = (|| -> Result<()> {
                    for f in files.iter().filter(|f| f.scope == scope) {
                        self.index_file(f, index)?;
                    }
                    let mut provider = ptr::null_mut();
                    // SAFETY: the index is live; the provider retains it.
                    unsafe {
                        check(
                            ffi::iree_io_parameter_index_provider_create(
                                ffi::iree_string_view_t::of(scope),
                                index,
                                ffi::PARAMETER_INDEX_PROVIDER_MAX_CONCURRENT_OPERATIONS,
                                alloc,
                                &mut provider,
                            ),
                            "creating a parameter provider",
                        )?;
                    }
                    providers.push(provider);
                    Ok(())
                })();
                // SAFETY: our reference to the index; the provider keeps its own.
                unsafe { ffi::iree_io_parameter_index_release(index) };
                indexed?;
            }
            let mut module = ptr::null_mut();
            // SAFETY: the providers are live; the module retains them.
            unsafe {
                check(
                    ffi::iree_io_parameters_module_create(
                        ffi::iree_runtime_instance_vm_instance(self.instance.instance),
                        providers.len(),
                        providers.as_ptr(),
                        alloc,
                        &mut module,
                    ),
                    "creating the parameters module",
                )?;
                let appended = check(
                    ffi::iree_runtime_session_append_module(self.session, module),
                    "adding the parameters module",
                );
                ffi::iree_vm_module_release(module);
                appended
            }
        })();
        for p in providers {
            // SAFETY: our references; the module holds its own.
            unsafe { ffi::iree_io_parameter_provider_release(p) };
        }
        result
    }

    /// The mode [`ParamMode::Auto`] picks for `f` (see there).
    fn auto_mode(&mut self, f: &ParamFile) -> Result<ParamMode> {
        let alloc = ffi::allocator_system();
        let mut index = ptr::null_mut();
        // SAFETY: out-pointer valid.
        unsafe {
            check(
                ffi::iree_io_parameter_index_create(alloc, &mut index),
                "creating a parameter index",
            )?;
        }
        let probe = ParamFile::new(&f.scope, &f.path, ParamMode::File);
        let keys = self.index_file(&probe, index).map(|()| {
            // SAFETY: the index is live; each entry lives as long as it.
            let n = unsafe { ffi::iree_io_parameter_index_count(index) };
            (0..n)
                .filter_map(|i| {
                    let mut entry = ptr::null();
                    let status = unsafe { ffi::iree_io_parameter_index_get(index, i, &mut entry) };
                    if !status.is_null() {
                        // SAFETY: a failed status we own.
                        unsafe { ffi::iree_status_free(status) };
                        return None;
                    }
                    if entry.is_null() {
                        return None;
                    }
                    Some(unsafe { (*entry).key.to_string() })
                })
                .collect::<Vec<_>>()
        });
        // SAFETY: our reference to the index.
        unsafe { ffi::iree_io_parameter_index_release(index) };
        let keys = keys?;
        let is_chunk = |k: &&String| {
            k.rsplit_once('@')
                .is_some_and(|(_, o)| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
        };
        let chunks: Vec<&String> = keys.iter().filter(is_chunk).collect();
        let module: &[u8] = &self._module_bytes;
        let named = |k: &&String| module.windows(k.len()).any(|w| w == k.as_bytes());
        Ok(if !chunks.is_empty() && !chunks.iter().any(named) {
            ParamMode::File
        } else {
            ParamMode::Map
        })
    }

    /// Opens one parameter file and adds its entries to `index`.
    fn index_file(
        &mut self,
        f: &ParamFile,
        index: *mut ffi::iree_io_parameter_index_t,
    ) -> Result<()> {
        let path_str = f.path.to_string_lossy().into_owned();
        let alloc = ffi::allocator_system();
        let mut handle = ptr::null_mut();
        let during = format!("opening the parameters {}", f.path.display());
        let mode = match f.mode {
            ParamMode::Auto => self.auto_mode(f)?,
            m => m,
        };
        match mode {
            ParamMode::Auto => unreachable!("resolved above"),
            ParamMode::File => {
                // SAFETY: out-pointer valid; the path is copied by IREE.
                unsafe {
                    check(
                        ffi::iree_io_file_handle_open(
                            ffi::IREE_IO_FILE_MODE_READ
                                | ffi::IREE_IO_FILE_MODE_SHARE_READ
                                | ffi::IREE_IO_FILE_MODE_ASYNC,
                            ffi::iree_string_view_t::of(&path_str),
                            alloc,
                            &mut handle,
                        ),
                        &during,
                    )?;
                }
            }
            ParamMode::Map => {
                let file = std::fs::File::open(&f.path).map_err(|source| Error::Io {
                    path: f.path.clone(),
                    source,
                })?;
                // SAFETY: read-only mapping of a file kiln never rewrites
                // in place; it outlives the session (kept in `_mapped`).
                let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
                    path: f.path.clone(),
                    source,
                })?;
                let span = ffi::iree_byte_span_t {
                    data: map.as_ptr() as *mut u8,
                    data_length: map.len(),
                };
                let release = ffi::iree_io_file_handle_release_callback_t {
                    fn_: None,
                    user_data: ptr::null_mut(),
                };
                self._mapped.push(Mapped { _map: map });
                // SAFETY: the span stays valid while the session lives; the
                // handle only allows reads.
                unsafe {
                    check(
                        ffi::iree_io_file_handle_wrap_host_allocation(
                            ffi::IREE_IO_FILE_ACCESS_READ,
                            span,
                            release,
                            alloc,
                            &mut handle,
                        ),
                        &during,
                    )?;
                }
            }
        }
        // SAFETY: handle and index are live; the index retains the handle.
        let parsed = unsafe {
            check(
                ffi::iree_io_parse_file_index(
                    ffi::iree_string_view_t::of(&path_str),
                    handle,
                    index,
                    alloc,
                ),
                &format!("reading the parameter index of {}", f.path.display()),
            )
        };
        // SAFETY: our reference to the handle.
        unsafe { ffi::iree_io_file_handle_release(handle) };
        parsed
    }
}

impl Session {
    /// The device the session runs on.
    pub fn device(&self) -> Device {
        self.core.device_kind
    }

    /// The module's name (`module @NAME` in its MLIR; `module` when
    /// unnamed).
    pub fn module_name(&self) -> &str {
        &self.core.module_name
    }

    /// The exported function `name` of the module (or `MODULE.NAME`).
    pub fn function(&self, name: &str) -> Result<Function> {
        let full = if name.contains('.') {
            name.to_string()
        } else {
            format!("{}.{name}", self.core.module_name)
        };
        let mut f = ffi::iree_vm_function_t {
            module: ptr::null_mut(),
            linkage: 0,
            ordinal: 0,
        };
        // SAFETY: the session is live; out-pointer valid.
        unsafe {
            check(
                ffi::iree_runtime_session_lookup_function(
                    self.core.session,
                    ffi::iree_string_view_t::of(&full),
                    &mut f,
                ),
                &format!("looking up the function {full}"),
            )
            .map_err(|_| Error::NoFunction { name: full.clone() })?;
        }
        // SAFETY: f was filled by the lookup; the strings live in the
        // module, which the session keeps alive, and are copied here.
        let (convention, declaration) = unsafe {
            (
                ffi::iree_vm_function_signature(&f)
                    .calling_convention
                    .to_string(),
                ffi::iree_vm_function_lookup_attr_by_name(
                    &f,
                    ffi::iree_string_view_t::of("iree.abi.declaration"),
                )
                .to_string(),
            )
        };
        Ok(Function {
            raw: f,
            name: full,
            convention,
            declaration,
        })
    }

    /// A tensor on the session's device holding `data` (row-major bytes of
    /// `shape` elements of `dtype`).
    pub fn tensor(&self, dtype: ElementType, shape: &[usize], data: &[u8]) -> Result<Tensor> {
        let count: usize = shape.iter().product();
        if count * dtype.bytes() != data.len() {
            return Err(Error::TensorSize {
                shape: shape.to_vec(),
                bytes: data.len(),
            });
        }
        let params = ffi::iree_hal_buffer_params_t {
            usage: ffi::IREE_HAL_BUFFER_USAGE_DEFAULT,
            access: 0,
            type_: ffi::IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
            queue_affinity: 0,
            min_alignment: 0,
        };
        let mut view = ptr::null_mut();
        // SAFETY: the session's device and allocator are live; the data is
        // copied into the new buffer.
        unsafe {
            check(
                ffi::iree_hal_buffer_view_allocate_buffer_copy(
                    ffi::iree_runtime_session_device(self.core.session),
                    ffi::iree_runtime_session_device_allocator(self.core.session),
                    shape.len(),
                    shape.as_ptr(),
                    dtype.raw(),
                    ffi::IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR,
                    params,
                    ffi::iree_const_byte_span_t {
                        data: data.as_ptr(),
                        data_length: data.len(),
                    },
                    &mut view,
                ),
                "allocating an input",
            )?;
        }
        Ok(Tensor {
            view,
            _core: self.core.clone(),
        })
    }

    /// Calls `f` on `inputs` (kept by the caller; IREE may write results
    /// into them in place) and returns its results.
    pub fn call(&mut self, f: &Function, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let alloc = ffi::allocator_system();
        let in_list = List::new(inputs.len(), alloc)?;
        for t in inputs {
            // SAFETY: the view is live; the list takes a new reference.
            unsafe {
                let mut r = ffi::iree_hal_buffer_view_retain_ref(t.view);
                check(
                    ffi::iree_vm_list_push_ref_move(in_list.0, &mut r),
                    "passing an input",
                )?;
            }
        }
        let out_list = List::new(8, alloc)?;
        // SAFETY: session, function and lists are live.
        unsafe {
            check(
                ffi::iree_runtime_session_call(self.core.session, &f.raw, in_list.0, out_list.0),
                &format!("calling {}", f.name),
            )?;
        }
        // SAFETY: the list is live; each element is retained for us.
        let n = unsafe { ffi::iree_vm_list_size(out_list.0) };
        let mut outs = Vec::with_capacity(n);
        for i in 0..n {
            let mut r = ffi::iree_vm_ref_t {
                ptr: ptr::null_mut(),
                type_: 0,
            };
            // SAFETY: i < size; the ref is released after taking the view.
            unsafe {
                check(
                    ffi::iree_vm_list_get_ref_retain(out_list.0, i, &mut r),
                    "reading a result",
                )?;
                let mut view = ptr::null_mut();
                let deref = check(
                    ffi::iree_hal_buffer_view_check_deref(r, &mut view),
                    "reading a result",
                );
                if deref.is_ok() {
                    ffi::iree_hal_buffer_view_retain(view);
                }
                ffi::iree_vm_ref_release(&mut r);
                deref?;
                outs.push(Tensor {
                    view,
                    _core: self.core.clone(),
                });
            }
        }
        Ok(outs)
    }

    /// The values of an i32 tensor, copied from the device.
    pub fn read_i32(&self, t: &Tensor) -> Result<Vec<i32>> {
        Ok(self
            .read(t)?
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// The values of an f32 tensor, copied from the device.
    pub fn read_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        Ok(self
            .read(t)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// The bytes of `t`, copied from the device.
    pub fn read(&self, t: &Tensor) -> Result<Vec<u8>> {
        let len = t.byte_length();
        let mut out = vec![0u8; len];
        if len == 0 {
            return Ok(out);
        }
        // SAFETY: the view's buffer is live; the target holds len bytes.
        unsafe {
            check(
                ffi::iree_hal_device_transfer_d2h(
                    ffi::iree_runtime_session_device(self.core.session),
                    ffi::iree_hal_buffer_view_buffer(t.view),
                    0,
                    out.as_mut_ptr() as *mut c_void,
                    len,
                    0,
                    ffi::infinite_timeout(),
                ),
                "reading a result from the device",
            )?;
        }
        Ok(out)
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if !self.session.is_null() {
            // SAFETY: owned here, released once, before the instance.
            unsafe { ffi::iree_runtime_session_release(self.session) };
        }
    }
}

/// A VM list owned for one call.
struct List(*mut ffi::iree_vm_list_t);

impl List {
    fn new(capacity: usize, alloc: ffi::iree_allocator_t) -> Result<List> {
        let mut l = ptr::null_mut();
        // SAFETY: out-pointer valid; an undefined element type holds refs.
        unsafe {
            check(
                ffi::iree_vm_list_create(
                    ffi::iree_vm_type_def_t { bits: 0 },
                    capacity,
                    alloc,
                    &mut l,
                ),
                "creating a call list",
            )?;
        }
        Ok(List(l))
    }
}

impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: owned here, released once.
        unsafe { ffi::iree_vm_list_release(self.0) };
    }
}

/// An exported function of a session's module.
#[derive(Clone)]
pub struct Function {
    raw: ffi::iree_vm_function_t,
    name: String,
    convention: String,
    declaration: String,
}

// SAFETY: a function handle is a module pointer and two numbers; the
// module lives as long as the session it came from.
unsafe impl Send for Function {}

impl Function {
    /// Its full name (`module.NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The VM calling convention (`0rrr_rrr`: refs in, refs out).
    pub fn calling_convention(&self) -> &str {
        &self.convention
    }

    /// The `iree.abi.declaration` reflection attribute: the function's
    /// signature as the compiler printed it (with tensor shapes), or "".
    pub fn declaration(&self) -> &str {
        &self.declaration
    }

    /// The number of arguments and results (from the calling convention).
    pub fn arity(&self) -> (usize, usize) {
        let body = self.convention.get(1..).unwrap_or("");
        let (args, results) = body.split_once('_').unwrap_or((body, ""));
        let count = |s: &str| s.chars().filter(|c| c.is_ascii_alphabetic()).count();
        (count(args), count(results))
    }
}

/// An element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementType {
    /// 32-bit signless integer (`i32`).
    I32,
    /// 32-bit IEEE float.
    F32,
    /// bfloat16.
    BF16,
    /// 16-bit IEEE float.
    F16,
    /// 8-bit signless integer.
    I8,
}

impl ElementType {
    /// Every element type kiln passes.
    pub const ALL: [ElementType; 5] = [
        ElementType::I32,
        ElementType::F32,
        ElementType::BF16,
        ElementType::F16,
        ElementType::I8,
    ];

    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            ElementType::I32 | ElementType::F32 => 4,
            ElementType::BF16 | ElementType::F16 => 2,
            ElementType::I8 => 1,
        }
    }

    fn raw(self) -> u32 {
        match self {
            ElementType::I32 => ffi::element_type(ffi::NUMERICAL_INTEGER, 32),
            ElementType::F32 => ffi::element_type(ffi::NUMERICAL_FLOAT_IEEE, 32),
            ElementType::BF16 => ffi::element_type(ffi::NUMERICAL_FLOAT_BRAIN, 16),
            ElementType::F16 => ffi::element_type(ffi::NUMERICAL_FLOAT_IEEE, 16),
            ElementType::I8 => ffi::element_type(ffi::NUMERICAL_INTEGER, 8),
        }
    }

    /// The element type of IREE's code, signed and unsigned integers read
    /// as signless.
    fn from_raw(raw: u32) -> Option<ElementType> {
        let numerical = match raw >> 24 {
            ffi::NUMERICAL_INTEGER_SIGNED | ffi::NUMERICAL_INTEGER_UNSIGNED => {
                ffi::NUMERICAL_INTEGER
            }
            n => n,
        };
        ElementType::ALL
            .into_iter()
            .find(|t| t.raw() == ffi::element_type(numerical, raw & 0xFF))
    }

    /// Its name in MLIR (`i32`, `f32`, `bf16`, `f16`, `i8`).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::I32 => "i32",
            ElementType::F32 => "f32",
            ElementType::BF16 => "bf16",
            ElementType::F16 => "f16",
            ElementType::I8 => "i8",
        }
    }

    /// The type of an MLIR name.
    pub fn from_name(name: &str) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A tensor on a session's device (an IREE buffer view).
pub struct Tensor {
    view: *mut ffi::iree_hal_buffer_view_t,
    // Dropped after the view: the device outlives its buffers.
    _core: Arc<Core>,
}

// SAFETY: buffer views are reference counted with atomics and only read
// through the session that made them.
unsafe impl Send for Tensor {}

impl Tensor {
    /// Its shape.
    pub fn shape(&self) -> Vec<usize> {
        // SAFETY: the view is live.
        unsafe {
            let rank = ffi::iree_hal_buffer_view_shape_rank(self.view);
            (0..rank)
                .map(|i| ffi::iree_hal_buffer_view_shape_dim(self.view, i))
                .collect()
        }
    }

    /// Its element type, when kiln knows it.
    pub fn element_type(&self) -> Option<ElementType> {
        // SAFETY: the view is live.
        ElementType::from_raw(unsafe { ffi::iree_hal_buffer_view_element_type(self.view) })
    }

    /// Its size in bytes.
    pub fn byte_length(&self) -> usize {
        // SAFETY: the view is live.
        unsafe { ffi::iree_hal_buffer_view_byte_length(self.view) }
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: owned reference, released once.
        unsafe { ffi::iree_hal_buffer_view_release(self.view) };
    }
}
