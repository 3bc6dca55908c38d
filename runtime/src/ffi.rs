//! The `extern "C"` surface of IREE's runtime that kiln-runtime uses, and
//! nothing more: written by hand from the headers of the source tree the
//! build script compiles (`runtime/src/iree/...` of IREE 3.13), so no
//! bindgen or libclang is needed. Each struct mirrors its C layout field by
//! field; the header it comes from is named beside it. Inline C helpers
//! (`iree_allocator_system()`, `iree_status_is_ok`, ...) are re-done in
//! Rust here.
#![allow(non_camel_case_types, missing_docs)]

use std::os::raw::{c_char, c_int, c_void};

/// `iree_status_t` (base/status.h): NULL is OK; otherwise a pointer whose
/// low bits hold the status code.
pub type iree_status_t = *mut c_void;
pub type iree_host_size_t = usize;
/// `iree_device_size_t` (base/config.h): `size_t` unless overridden.
pub type iree_device_size_t = usize;
pub type iree_hal_dim_t = iree_device_size_t;
pub type iree_hal_element_type_t = u32;
pub type iree_hal_encoding_type_t = u32;

/// The code in a status's low bits (`IREE_STATUS_CODE_MASK`).
pub const IREE_STATUS_CODE_MASK: usize = 0x1F;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_string_view_t {
    pub data: *const c_char,
    pub size: iree_host_size_t,
}

impl iree_string_view_t {
    pub fn of(s: &str) -> Self {
        iree_string_view_t {
            data: s.as_ptr().cast(),
            size: s.len(),
        }
    }
    /// The view's bytes as text (lossy), or "" for an empty view.
    ///
    /// # Safety
    /// `data` must point at `size` readable bytes while the result lives.
    pub unsafe fn to_string(self) -> String {
        if self.data.is_null() || self.size == 0 {
            return String::new();
        }
        let bytes = std::slice::from_raw_parts(self.data.cast::<u8>(), self.size);
        String::from_utf8_lossy(bytes).into_owned()
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_const_byte_span_t {
    pub data: *const u8,
    pub data_length: iree_host_size_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_byte_span_t {
    pub data: *mut u8,
    pub data_length: iree_host_size_t,
}

pub type iree_allocator_ctl_fn_t = unsafe extern "C" fn(
    self_: *mut c_void,
    command: c_int,
    params: *const c_void,
    inout_ptr: *mut *mut c_void,
) -> iree_status_t;

/// `iree_allocator_t` (base/allocator.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_allocator_t {
    pub self_: *mut c_void,
    pub ctl: Option<iree_allocator_ctl_fn_t>,
}

/// `iree_allocator_system()` as the build defines it
/// (`IREE_ALLOCATOR_SYSTEM_CTL=iree_allocator_libc_ctl`).
pub fn allocator_system() -> iree_allocator_t {
    iree_allocator_t {
        self_: std::ptr::null_mut(),
        ctl: Some(iree_allocator_libc_ctl),
    }
}

/// `iree_allocator_null()`: the caller keeps ownership of the memory.
pub fn allocator_null() -> iree_allocator_t {
    iree_allocator_t {
        self_: std::ptr::null_mut(),
        ctl: None,
    }
}

/// `iree_timeout_t` (base/time.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_timeout_t {
    pub type_: c_int,
    pub nanos: i64,
}

/// `iree_infinite_timeout()`: absolute, at the infinite future.
pub fn infinite_timeout() -> iree_timeout_t {
    iree_timeout_t {
        type_: 0,
        nanos: i64::MAX,
    }
}

/// `iree_runtime_instance_options_t` (runtime/instance.h).
#[repr(C)]
pub struct iree_runtime_instance_options_t {
    pub driver_registry: *mut c_void,
}

/// `iree_runtime_session_options_t` (runtime/session.h):
/// `iree_vm_context_flags_t` is `uint32_t`, `iree_runtime_session_builtins_t`
/// is `uint64_t`.
#[repr(C)]
pub struct iree_runtime_session_options_t {
    pub context_flags: u32,
    pub builtin_modules: u64,
}

/// `iree_vm_function_t` (vm/module.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_vm_function_t {
    pub module: *mut c_void,
    pub linkage: u16,
    pub ordinal: u16,
}

/// `iree_vm_function_signature_t` (vm/module.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_vm_function_signature_t {
    pub calling_convention: iree_string_view_t,
}

/// `iree_vm_type_def_t` (vm/type_def.h): one machine word of bit fields;
/// 0 is the undefined (any) type.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_vm_type_def_t {
    pub bits: usize,
}

/// `iree_vm_ref_t` (vm/ref.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_vm_ref_t {
    pub ptr: *mut c_void,
    pub type_: usize,
}

/// `iree_hal_buffer_params_t` (hal/buffer.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_hal_buffer_params_t {
    pub usage: u32,
    pub access: u16,
    pub type_: u32,
    pub queue_affinity: u64,
    pub min_alignment: iree_device_size_t,
}

/// `IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL` (hal/buffer.h): device-visible | 1<<5.
pub const IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL: u32 = (1 << 4) | (1 << 5);
/// `IREE_HAL_BUFFER_USAGE_DEFAULT`: transfer | dispatch storage.
pub const IREE_HAL_BUFFER_USAGE_DEFAULT: u32 = 0b11 | (0b11 << 10);
/// `IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR`.
pub const IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR: u32 = 1;

/// `iree_hal_make_element_type(numerical_type, bit_count)`.
pub const fn element_type(numerical: u32, bits: u32) -> u32 {
    (numerical << 24) | bits
}
/// `IREE_HAL_NUMERICAL_TYPE_INTEGER` (signless).
pub const NUMERICAL_INTEGER: u32 = 0x10;
/// `IREE_HAL_NUMERICAL_TYPE_INTEGER_SIGNED`.
pub const NUMERICAL_INTEGER_SIGNED: u32 = 0x11;
/// `IREE_HAL_NUMERICAL_TYPE_INTEGER_UNSIGNED`.
pub const NUMERICAL_INTEGER_UNSIGNED: u32 = 0x12;
/// `IREE_HAL_NUMERICAL_TYPE_FLOAT_IEEE`.
pub const NUMERICAL_FLOAT_IEEE: u32 = 0x21;
/// `IREE_HAL_NUMERICAL_TYPE_FLOAT_BRAIN`.
pub const NUMERICAL_FLOAT_BRAIN: u32 = 0x22;

/// `IREE_IO_FILE_MODE_*` (io/file_handle.h).
pub const IREE_IO_FILE_MODE_READ: u64 = 1 << 0;
pub const IREE_IO_FILE_MODE_SHARE_READ: u64 = 1 << 6;
pub const IREE_IO_FILE_MODE_ASYNC: u64 = 1 << 9;
/// `IREE_IO_FILE_ACCESS_READ` (io/file_handle.h).
pub const IREE_IO_FILE_ACCESS_READ: u32 = 1 << 0;

/// `iree_io_file_handle_release_callback_t` (io/file_handle.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_io_file_handle_release_callback_t {
    pub fn_: Option<
        unsafe extern "C" fn(user_data: *mut c_void, primitive: iree_io_file_handle_primitive_t),
    >,
    pub user_data: *mut c_void,
}

/// `iree_io_file_handle_primitive_t` (io/file_handle.h): a type tag and a
/// union of the platform primitives, the largest a byte span.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct iree_io_file_handle_primitive_t {
    pub type_: c_int,
    pub value: iree_byte_span_t,
}

/// `IREE_IO_PARAMETER_INDEX_PROVIDER_DEFAULT_MAX_CONCURRENT_OPERATIONS`.
pub const PARAMETER_INDEX_PROVIDER_MAX_CONCURRENT_OPERATIONS: usize = 16;

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    iree_runtime_instance_t,
    iree_runtime_session_t,
    iree_hal_device_t,
    iree_hal_allocator_t,
    iree_hal_buffer_t,
    iree_hal_buffer_view_t,
    iree_vm_instance_t,
    iree_vm_module_t,
    iree_vm_list_t,
    iree_io_file_handle_t,
    iree_io_parameter_index_t,
    iree_io_parameter_provider_t
);

/// The head of `iree_io_parameter_index_entry_t`: only its key is read,
/// through a pointer IREE hands out (the rest of the struct follows).
#[repr(C)]
pub struct iree_io_parameter_index_entry_t {
    pub key: iree_string_view_t,
}

extern "C" {
    pub fn iree_allocator_libc_ctl(
        self_: *mut c_void,
        command: c_int,
        params: *const c_void,
        inout_ptr: *mut *mut c_void,
    ) -> iree_status_t;

    pub fn iree_status_format(
        status: iree_status_t,
        buffer_capacity: iree_host_size_t,
        buffer: *mut c_char,
        out_buffer_length: *mut iree_host_size_t,
    ) -> bool;
    pub fn iree_status_free(status: iree_status_t);

    pub fn iree_flags_parse(
        mode: u32,
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
    ) -> iree_status_t;

    pub fn iree_runtime_instance_options_initialize(out: *mut iree_runtime_instance_options_t);
    pub fn iree_runtime_instance_options_use_all_available_drivers(
        options: *mut iree_runtime_instance_options_t,
    );
    pub fn iree_runtime_instance_create(
        options: *const iree_runtime_instance_options_t,
        host_allocator: iree_allocator_t,
        out: *mut *mut iree_runtime_instance_t,
    ) -> iree_status_t;
    pub fn iree_runtime_instance_release(instance: *mut iree_runtime_instance_t);
    pub fn iree_runtime_instance_vm_instance(
        instance: *const iree_runtime_instance_t,
    ) -> *mut iree_vm_instance_t;
    pub fn iree_runtime_instance_try_create_default_device(
        instance: *mut iree_runtime_instance_t,
        driver_name: iree_string_view_t,
        out_device: *mut *mut iree_hal_device_t,
    ) -> iree_status_t;

    pub fn iree_hal_device_release(device: *mut iree_hal_device_t);

    pub fn iree_runtime_session_options_initialize(out: *mut iree_runtime_session_options_t);
    pub fn iree_runtime_session_create_with_device(
        instance: *mut iree_runtime_instance_t,
        options: *const iree_runtime_session_options_t,
        device: *mut iree_hal_device_t,
        host_allocator: iree_allocator_t,
        out_session: *mut *mut iree_runtime_session_t,
    ) -> iree_status_t;
    pub fn iree_runtime_session_release(session: *mut iree_runtime_session_t);
    pub fn iree_runtime_session_device(
        session: *const iree_runtime_session_t,
    ) -> *mut iree_hal_device_t;
    pub fn iree_runtime_session_device_allocator(
        session: *const iree_runtime_session_t,
    ) -> *mut iree_hal_allocator_t;
    pub fn iree_runtime_session_append_module(
        session: *mut iree_runtime_session_t,
        module: *mut iree_vm_module_t,
    ) -> iree_status_t;
    pub fn iree_runtime_session_lookup_function(
        session: *const iree_runtime_session_t,
        full_name: iree_string_view_t,
        out_function: *mut iree_vm_function_t,
    ) -> iree_status_t;
    pub fn iree_runtime_session_call(
        session: *mut iree_runtime_session_t,
        function: *const iree_vm_function_t,
        input_list: *mut iree_vm_list_t,
        output_list: *mut iree_vm_list_t,
    ) -> iree_status_t;

    pub fn iree_vm_module_release(module: *mut iree_vm_module_t);
    pub fn iree_vm_module_name(module: *const iree_vm_module_t) -> iree_string_view_t;
    pub fn iree_vm_bytecode_module_create(
        instance: *mut iree_vm_instance_t,
        flags: u32,
        archive_contents: iree_const_byte_span_t,
        archive_allocator: iree_allocator_t,
        allocator: iree_allocator_t,
        out_module: *mut *mut iree_vm_module_t,
    ) -> iree_status_t;
    pub fn iree_vm_function_signature(
        function: *const iree_vm_function_t,
    ) -> iree_vm_function_signature_t;
    pub fn iree_vm_function_lookup_attr_by_name(
        function: *const iree_vm_function_t,
        key: iree_string_view_t,
    ) -> iree_string_view_t;

    pub fn iree_vm_list_create(
        element_type: iree_vm_type_def_t,
        initial_capacity: iree_host_size_t,
        allocator: iree_allocator_t,
        out_list: *mut *mut iree_vm_list_t,
    ) -> iree_status_t;
    pub fn iree_vm_list_release(list: *mut iree_vm_list_t);
    pub fn iree_vm_list_size(list: *const iree_vm_list_t) -> iree_host_size_t;
    pub fn iree_vm_list_push_ref_move(
        list: *mut iree_vm_list_t,
        value: *mut iree_vm_ref_t,
    ) -> iree_status_t;
    pub fn iree_vm_list_get_ref_retain(
        list: *const iree_vm_list_t,
        i: iree_host_size_t,
        out_value: *mut iree_vm_ref_t,
    ) -> iree_status_t;
    pub fn iree_vm_ref_release(ref_: *mut iree_vm_ref_t);

    pub fn iree_hal_buffer_view_retain_ref(value: *mut iree_hal_buffer_view_t) -> iree_vm_ref_t;
    pub fn iree_hal_buffer_view_check_deref(
        ref_: iree_vm_ref_t,
        out_ptr: *mut *mut iree_hal_buffer_view_t,
    ) -> iree_status_t;
    pub fn iree_hal_buffer_view_retain(view: *mut iree_hal_buffer_view_t);
    pub fn iree_hal_buffer_view_release(view: *mut iree_hal_buffer_view_t);
    pub fn iree_hal_buffer_view_buffer(
        view: *const iree_hal_buffer_view_t,
    ) -> *mut iree_hal_buffer_t;
    pub fn iree_hal_buffer_view_shape_rank(view: *const iree_hal_buffer_view_t)
        -> iree_host_size_t;
    pub fn iree_hal_buffer_view_shape_dim(
        view: *const iree_hal_buffer_view_t,
        index: iree_host_size_t,
    ) -> iree_hal_dim_t;
    pub fn iree_hal_buffer_view_element_type(
        view: *const iree_hal_buffer_view_t,
    ) -> iree_hal_element_type_t;
    pub fn iree_hal_buffer_view_byte_length(
        view: *const iree_hal_buffer_view_t,
    ) -> iree_device_size_t;
    pub fn iree_hal_buffer_view_allocate_buffer_copy(
        device: *mut iree_hal_device_t,
        allocator: *mut iree_hal_allocator_t,
        shape_rank: iree_host_size_t,
        shape: *const iree_hal_dim_t,
        element_type: iree_hal_element_type_t,
        encoding_type: iree_hal_encoding_type_t,
        buffer_params: iree_hal_buffer_params_t,
        initial_data: iree_const_byte_span_t,
        out_buffer_view: *mut *mut iree_hal_buffer_view_t,
    ) -> iree_status_t;
    pub fn iree_hal_device_transfer_d2h(
        device: *mut iree_hal_device_t,
        source: *mut iree_hal_buffer_t,
        source_offset: iree_device_size_t,
        target: *mut c_void,
        data_length: iree_device_size_t,
        flags: u32,
        timeout: iree_timeout_t,
    ) -> iree_status_t;

    pub fn iree_io_file_handle_open(
        mode: u64,
        path: iree_string_view_t,
        host_allocator: iree_allocator_t,
        out_handle: *mut *mut iree_io_file_handle_t,
    ) -> iree_status_t;
    pub fn iree_io_file_handle_wrap_host_allocation(
        allowed_access: u32,
        host_allocation: iree_byte_span_t,
        release_callback: iree_io_file_handle_release_callback_t,
        host_allocator: iree_allocator_t,
        out_handle: *mut *mut iree_io_file_handle_t,
    ) -> iree_status_t;
    pub fn iree_io_file_handle_release(handle: *mut iree_io_file_handle_t);
    pub fn iree_io_parameter_index_create(
        host_allocator: iree_allocator_t,
        out_index: *mut *mut iree_io_parameter_index_t,
    ) -> iree_status_t;
    pub fn iree_io_parameter_index_release(index: *mut iree_io_parameter_index_t);
    pub fn iree_io_parameter_index_count(index: *mut iree_io_parameter_index_t)
        -> iree_host_size_t;
    pub fn iree_io_parameter_index_get(
        index: *mut iree_io_parameter_index_t,
        i: iree_host_size_t,
        out_entry: *mut *const iree_io_parameter_index_entry_t,
    ) -> iree_status_t;
    pub fn iree_io_parse_file_index(
        path: iree_string_view_t,
        file_handle: *mut iree_io_file_handle_t,
        index: *mut iree_io_parameter_index_t,
        host_allocator: iree_allocator_t,
    ) -> iree_status_t;
    pub fn iree_io_parameter_index_provider_create(
        scope: iree_string_view_t,
        index: *mut iree_io_parameter_index_t,
        max_concurrent_operations: iree_host_size_t,
        host_allocator: iree_allocator_t,
        out_provider: *mut *mut iree_io_parameter_provider_t,
    ) -> iree_status_t;
    pub fn iree_io_parameter_provider_release(provider: *mut iree_io_parameter_provider_t);
    pub fn iree_io_parameters_module_create(
        instance: *mut iree_vm_instance_t,
        provider_count: iree_host_size_t,
        providers: *const *mut iree_io_parameter_provider_t,
        host_allocator: iree_allocator_t,
        out_module: *mut *mut iree_vm_module_t,
    ) -> iree_status_t;
}
