//! A run's report as the Python half's `Report`, built here from the
//! native report: no JSON text between the two halves. A report with
//! nothing but a value, console lines and tool calls (most) is built
//! field by field; any other goes through `Report.from_dict` with the
//! report as plain Python values. Either way `raw` (the report as
//! `harness run --json` has it) is made only when first read.

use harness::ExecutionReport;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

/// The classes of `script_harness._report` a report is made of, and
/// `object.__new__`, looked up once.
struct Classes {
    report: Py<PyAny>,
    metrics: Py<PyAny>,
    console_entry: Py<PyAny>,
    tool_call_record: Py<PyAny>,
    new: Py<PyAny>,
}

fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();
    CLASSES.get_or_try_init(py, || {
        let m = py.import("script_harness._report")?;
        Ok(Classes {
            report: m.getattr("Report")?.unbind(),
            metrics: m.getattr("Metrics")?.unbind(),
            console_entry: m.getattr("ConsoleEntry")?.unbind(),
            tool_call_record: m.getattr("ToolCallRecord")?.unbind(),
            new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
        })
    })
}

/// A report kept native until its `raw` is read. Its value is only a
/// placeholder: the `Report` holds the value, and hands it to `plain`.
#[pyclass(frozen, module = "script_harness._native")]
pub(crate) struct NativeReport {
    report: ExecutionReport,
}

#[pymethods]
impl NativeReport {
    /// The report as plain Python values, what `json.loads` makes of
    /// `harness run --json`, with `value` (the `Report`'s) as its value.
    fn plain<'py>(&self, py: Python<'py>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let d = plain(py, &self.report)?;
        if let Ok(dict) = d.cast::<PyDict>() {
            let key = intern!(py, "value");
            if dict.contains(key)? {
                dict.set_item(key, value)?;
            }
        }
        Ok(d)
    }
}

/// `report` as plain Python values; where it cannot be converted, a
/// `HarnessInternalError` report saying why (as `embed::report_json`).
fn plain<'py>(py: Python<'py>, report: &ExecutionReport) -> PyResult<Bound<'py, PyAny>> {
    match pythonize::pythonize(py, report) {
        Ok(d) => Ok(d),
        Err(e) => {
            let text = harness::embed::report_json(&ExecutionReport::failed(
                &report.metrics.engine,
                harness::ScriptError::new(
                    harness::ErrorCode::HarnessInternalError,
                    harness::Phase::Finalizing,
                    format!("the report could not be converted: {e}"),
                ),
            ));
            py.import("json")?.call_method1("loads", (text,))
        }
    }
}

/// A frozen dataclass instance of `cls` whose fields `fill` sets in its
/// `__dict__` (what `_report._frozen` does on the Python side).
fn frozen<'py>(
    py: Python<'py>,
    c: &Classes,
    cls: &Py<PyAny>,
    fill: impl FnOnce(&Bound<'py, PyDict>) -> PyResult<()>,
) -> PyResult<Bound<'py, PyAny>> {
    let obj = c.new.bind(py).call1((cls.bind(py),))?;
    let dict = obj
        .getattr(intern!(py, "__dict__"))?
        .cast_into::<PyDict>()?;
    fill(&dict)?;
    Ok(obj)
}

/// Whether the report has only what [`report_object`] builds field by
/// field.
fn plain_enough(r: &ExecutionReport) -> bool {
    r.error.is_none()
        && r.approvals.is_empty()
        && r.progress.is_empty()
        && r.warnings.is_empty()
        && r.detached_tasks.is_empty()
        && !r.retried
        && r.suspension.is_none()
        && r.session.is_none()
}

/// `report` as a `script_harness.Report`.
pub(crate) fn report_object(py: Python<'_>, mut report: ExecutionReport) -> PyResult<Py<PyAny>> {
    let c = classes(py)?;
    if !plain_enough(&report) {
        let d = plain(py, &report)?;
        return Ok(c
            .report
            .bind(py)
            .call_method1(intern!(py, "from_dict"), (d,))?
            .unbind());
    }
    let empty = PyTuple::empty(py);
    let value = pythonize::pythonize(py, &report.value).map_err(to_py_err)?;
    let console = PyTuple::new(
        py,
        report
            .console
            .iter()
            .map(|e| {
                let level = pythonize::pythonize(py, &e.level).map_err(to_py_err)?;
                frozen(py, c, &c.console_entry, |d| {
                    d.set_item(intern!(py, "level"), level)?;
                    d.set_item(intern!(py, "text"), &e.text)
                })
            })
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    let calls = PyTuple::new(
        py,
        report
            .tool_calls
            .iter()
            .map(|t| {
                let status = pythonize::pythonize(py, &t.status).map_err(to_py_err)?;
                let error = pythonize::pythonize(py, &t.error).map_err(to_py_err)?;
                frozen(py, c, &c.tool_call_record, |d| {
                    d.set_item(intern!(py, "id"), t.id)?;
                    d.set_item(intern!(py, "tool"), &t.tool)?;
                    d.set_item(intern!(py, "status"), status)?;
                    d.set_item(intern!(py, "duration_ms"), t.duration_ms)?;
                    d.set_item(intern!(py, "error"), error)
                })
            })
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    let m = &report.metrics;
    let metrics = frozen(py, c, &c.metrics, |d| {
        d.set_item(intern!(py, "engine"), &m.engine)?;
        d.set_item(intern!(py, "duration_ms"), m.duration_ms)?;
        d.set_item(intern!(py, "tool_calls"), m.tool_calls)?;
        d.set_item(intern!(py, "memory_used_bytes"), m.memory_used_bytes)?;
        d.set_item(intern!(py, "fuel_consumed"), m.fuel_consumed)
    })?;
    let (ok, console_dropped, calls_dropped, progress_dropped) = (
        report.ok,
        report.console_dropped,
        report.tool_calls_dropped,
        report.progress_dropped,
    );
    let script_id = pyo3::types::PyString::new(py, &report.script_id);
    // The value is held once, by the `Report`; the native report keeps
    // only where it goes in `raw`.
    if report.value.is_some() {
        report.value = Some(serde_json::Value::Null);
    }
    let native = Py::new(py, NativeReport { report })?;
    let obj = frozen(py, c, &c.report, |d| {
        d.set_item(intern!(py, "ok"), ok)?;
        d.set_item(intern!(py, "value"), value)?;
        d.set_item(intern!(py, "error"), py.None())?;
        d.set_item(intern!(py, "console"), console)?;
        d.set_item(intern!(py, "console_dropped"), console_dropped)?;
        d.set_item(intern!(py, "tool_calls"), calls)?;
        d.set_item(intern!(py, "tool_calls_dropped"), calls_dropped)?;
        d.set_item(intern!(py, "approvals"), &empty)?;
        d.set_item(intern!(py, "progress"), &empty)?;
        d.set_item(intern!(py, "progress_dropped"), progress_dropped)?;
        d.set_item(intern!(py, "metrics"), metrics)?;
        d.set_item(intern!(py, "script_id"), script_id)?;
        d.set_item(intern!(py, "warnings"), &empty)?;
        d.set_item(intern!(py, "detached_tasks"), &empty)?;
        d.set_item(intern!(py, "retried"), false)?;
        d.set_item(intern!(py, "suspension"), py.None())?;
        d.set_item(intern!(py, "session"), py.None())?;
        // `raw`, made from this when first read (`Report.__getattr__`).
        d.set_item(intern!(py, "_native"), native)
    })?;
    Ok(obj.unbind())
}

fn to_py_err(e: pythonize::PythonizeError) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(e.to_string())
}
