//! The JNI entry points of the Java class `dev.kiln.KilnModel`
//! (`runtime/java/dev/kiln/KilnModel.java`): each native method of the
//! class, over a [`Model`] behind a handle. Every failure, a panic
//! included, becomes a `dev.kiln.KilnException` with kiln's message:
//! nothing here aborts the process an app runs in.

use crate::model::{device, Model};
use jni::objects::{JClass, JIntArray, JString};
use jni::sys::{jboolean, jint, jintArray, jlong, jstring, JNI_FALSE};
use jni::JNIEnv;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// The Java exception every failure becomes.
const EXCEPTION: &str = "dev/kiln/KilnException";

/// Runs `f`, turning its error or panic into a pending `KilnException`
/// and `fallback` for Java (which the exception supersedes).
fn guard<T>(env: &mut JNIEnv, fallback: T, f: impl FnOnce(&mut JNIEnv) -> Result<T, String>) -> T {
    let result = catch_unwind(AssertUnwindSafe(|| f(env)));
    let message = match result {
        Ok(Ok(v)) => return v,
        Ok(Err(m)) => m,
        Err(panic) => crate::capi::panic_message(panic.as_ref()),
    };
    // A Java exception already pending (from a JNI call) is kept.
    if !env.exception_check().unwrap_or(true) {
        let _ = env.throw_new(EXCEPTION, message);
    }
    fallback
}

/// The model behind a handle from `nativeOpen`.
fn model<'a>(handle: jlong) -> Result<&'a Mutex<Model>, String> {
    if handle == 0 {
        return Err("the model is closed".into());
    }
    // SAFETY: a non-zero handle is a `Box<Mutex<Model>>` from `nativeOpen`
    // that `nativeClose` has not freed (the Java class zeroes its handle
    // on close, under its lock).
    Ok(unsafe { &*(handle as *const Mutex<Model>) })
}

/// Runs `f` on the model behind `handle`.
fn with_model<T>(
    handle: jlong,
    f: impl FnOnce(&mut Model) -> Result<T, String>,
) -> Result<T, String> {
    let m = model(handle)?;
    let mut guard = m.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

fn string(env: &mut JNIEnv, s: &JString) -> Result<String, String> {
    if s.is_null() {
        return Err("a null string".into());
    }
    env.get_string(s)
        .map(Into::into)
        .map_err(|e| format!("reading a Java string: {e}"))
}

fn new_string(env: &mut JNIEnv, s: &str) -> Result<jstring, String> {
    env.new_string(s)
        .map(|s| s.into_raw())
        .map_err(|e| format!("making a Java string: {e}"))
}

fn count(n: jint, what: &str) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("{what} {n}: must be at least 0"))
}

/// `KilnModel.nativeOpen(String dir, String device, int workerGroups)`.
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeOpen<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    dir: JString<'l>,
    device_name: JString<'l>,
    worker_groups: jint,
) -> jlong {
    guard(&mut env, 0, |env| {
        let dir = string(env, &dir)?;
        let device = device(&string(env, &device_name)?).map_err(|e| e.to_string())?;
        let groups = match count(worker_groups, "workerGroups")? {
            0 => None,
            n => Some(n),
        };
        let m = Model::open(dir.as_ref(), device, groups).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(Mutex::new(m))) as jlong)
    })
}

/// `KilnModel.nativeGenerateIds(long handle, int[] prompt, int maxNewTokens)`.
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeGenerateIds<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    prompt: JIntArray<'l>,
    max_new_tokens: jint,
) -> jintArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        if prompt.is_null() {
            return Err("a null prompt".into());
        }
        let n = env
            .get_array_length(&prompt)
            .map_err(|e| format!("reading the prompt: {e}"))?;
        let mut ids = vec![0i32; n as usize];
        env.get_int_array_region(&prompt, 0, &mut ids)
            .map_err(|e| format!("reading the prompt: {e}"))?;
        let max = count(max_new_tokens, "maxNewTokens")?;
        let out = with_model(handle, |m| {
            m.generate_ids(&ids, max).map_err(|e| e.to_string())
        })?;
        let arr = env
            .new_int_array(out.len() as jint)
            .map_err(|e| format!("making the ids: {e}"))?;
        env.set_int_array_region(&arr, 0, &out)
            .map_err(|e| format!("making the ids: {e}"))?;
        Ok(arr.into_raw())
    })
}

/// `KilnModel.nativeGenerate(long handle, String prompt, int maxNewTokens, boolean chat)`.
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeGenerate<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    prompt: JString<'l>,
    max_new_tokens: jint,
    chat: jboolean,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let prompt = string(env, &prompt)?;
        let max = count(max_new_tokens, "maxNewTokens")?;
        let text = with_model(handle, |m| {
            m.generate(&prompt, max, chat != JNI_FALSE)
                .map_err(|e| e.to_string())
        })?;
        new_string(env, &text)
    })
}

/// `KilnModel.nativeChat(long handle, String userMessage, int maxNewTokens)`.
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeChat<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    message: JString<'l>,
    max_new_tokens: jint,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let message = string(env, &message)?;
        let max = count(max_new_tokens, "maxNewTokens")?;
        let text = with_model(handle, |m| m.chat(&message, max).map_err(|e| e.to_string()))?;
        new_string(env, &text)
    })
}

/// `KilnModel.nativeReset(long handle)`.
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeReset<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    guard(&mut env, (), |_| {
        with_model(handle, |m| m.reset().map_err(|e| e.to_string()))
    })
}

/// `KilnModel.nativeClose(long handle)`: frees the model (a zero handle is
/// a no-op).
#[no_mangle]
pub extern "system" fn Java_dev_kiln_KilnModel_nativeClose<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    guard(&mut env, (), |_| {
        if handle != 0 {
            // SAFETY: the handle is a `Box<Mutex<Model>>` from `nativeOpen`,
            // freed once: the Java class zeroes it under its lock.
            drop(unsafe { Box::from_raw(handle as *mut Mutex<Model>) });
        }
        Ok(())
    })
}
