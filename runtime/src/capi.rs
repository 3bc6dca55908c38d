//! The C ABI of `libkiln_runtime.so`, declared in
//! `runtime/include/kiln_runtime.h`: a [`Model`] behind an opaque pointer.
//! Every failure, a panic included, is a NULL (or -1) return and kiln's
//! message in `*error`; nothing here aborts the calling process. Each
//! function is `unsafe`: it trusts the pointers it is given, as C does.

use crate::model::{device, Model};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// A loaded model (`kiln_model` in C).
pub struct KilnModel(Mutex<Model>);

/// Stores `message` in `*error` when `error` is not NULL.
fn set_error(error: *mut *mut c_char, message: String) {
    if !error.is_null() {
        let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the caller passes a valid `char **` or NULL.
        unsafe { *error = c.into_raw() };
    }
}

/// The message of a caught panic, as the C ABI and JNI report it.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("kiln-runtime: internal error (a panic): {what}")
}

/// Runs `f`, turning its error or panic into `fallback` and `*error`.
fn guard<T>(error: *mut *mut c_char, fallback: T, f: impl FnOnce() -> Result<T, String>) -> T {
    let message = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return v,
        Ok(Err(m)) => m,
        Err(panic) => panic_message(panic.as_ref()),
    };
    set_error(error, message);
    fallback
}

/// A C string argument as UTF-8.
fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, String> {
    if s.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

/// The model behind `model`, locked.
fn with_model<T>(
    model: *mut KilnModel,
    f: impl FnOnce(&mut Model) -> Result<T, String>,
) -> Result<T, String> {
    if model.is_null() {
        return Err("the model is NULL".into());
    }
    // SAFETY: a non-NULL pointer from `kiln_model_open`, not yet closed.
    let m = unsafe { &*model };
    let mut guard = m.0.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut guard)
}

fn owned(s: String) -> *mut c_char {
    CString::new(s.replace('\0', " "))
        .unwrap_or_default()
        .into_raw()
}

fn count(n: i32, what: &str) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("{what} {n}: must be at least 0"))
}

/// `kiln_model_open`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_open(
    dir: *const c_char,
    device_name: *const c_char,
    worker_groups: i32,
    error: *mut *mut c_char,
) -> *mut KilnModel {
    guard(error, std::ptr::null_mut(), || {
        let dir = text(dir, "dir")?;
        let device = device(text(device_name, "device")?).map_err(|e| e.to_string())?;
        let groups = match count(worker_groups, "worker_groups")? {
            0 => None,
            n => Some(n),
        };
        let m = Model::open(dir.as_ref(), device, groups).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(KilnModel(Mutex::new(m)))))
    })
}

/// `kiln_model_generate_ids`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_generate_ids(
    model: *mut KilnModel,
    prompt: *const i32,
    prompt_len: usize,
    max_new_tokens: i32,
    out: *mut i32,
    out_capacity: usize,
    error: *mut *mut c_char,
) -> i64 {
    guard(error, -1, || {
        if prompt.is_null() || (out.is_null() && out_capacity > 0) {
            return Err("the prompt or the output is NULL".into());
        }
        // SAFETY: the caller passes `prompt_len` readable ids.
        let ids = unsafe { std::slice::from_raw_parts(prompt, prompt_len) }.to_vec();
        let max = count(max_new_tokens, "max_new_tokens")?.min(out_capacity);
        let new = with_model(model, |m| {
            m.generate_ids(&ids, max).map_err(|e| e.to_string())
        })?;
        // SAFETY: room for `out_capacity` ≥ `new.len()` ids.
        unsafe { std::ptr::copy_nonoverlapping(new.as_ptr(), out, new.len()) };
        Ok(new.len() as i64)
    })
}

/// `kiln_model_generate`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_generate(
    model: *mut KilnModel,
    prompt: *const c_char,
    max_new_tokens: i32,
    chat: i32,
    error: *mut *mut c_char,
) -> *mut c_char {
    guard(error, std::ptr::null_mut(), || {
        let prompt = text(prompt, "prompt")?;
        let max = count(max_new_tokens, "max_new_tokens")?;
        let s = with_model(model, |m| {
            m.generate(prompt, max, chat != 0)
                .map_err(|e| e.to_string())
        })?;
        Ok(owned(s))
    })
}

/// `kiln_model_chat`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_chat(
    model: *mut KilnModel,
    message: *const c_char,
    max_new_tokens: i32,
    error: *mut *mut c_char,
) -> *mut c_char {
    guard(error, std::ptr::null_mut(), || {
        let message = text(message, "message")?;
        let max = count(max_new_tokens, "max_new_tokens")?;
        let s = with_model(model, |m| m.chat(message, max).map_err(|e| e.to_string()))?;
        Ok(owned(s))
    })
}

/// `kiln_model_reset`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_reset(model: *mut KilnModel, error: *mut *mut c_char) -> i32 {
    guard(error, -1, || {
        with_model(model, |m| m.reset().map_err(|e| e.to_string()))?;
        Ok(0)
    })
}

/// `kiln_model_close`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_model_close(model: *mut KilnModel) {
    if !model.is_null() {
        // SAFETY: a pointer from `kiln_model_open`, closed once.
        drop(unsafe { Box::from_raw(model) });
    }
}

/// `kiln_string_free`: see the header.
///
/// # Safety
///
/// Pointers as the header says: valid or NULL, strings NUL-terminated,
/// a model from `kiln_model_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kiln_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: a string this library returned with `CString::into_raw`.
        drop(unsafe { CString::from_raw(s) });
    }
}
