"""The C layer: every exported symbol declared, structures the size the library says, every result
code mapped to its exception, and the loader's refusals."""

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wccl
from wccl import _lib


def exported_symbols(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("wccl_")}


def test_every_exported_symbol_is_declared():
    assert exported_symbols(wccl.LIBRARY_PATH) == _lib.SIGNATURES


def test_structures_match_the_library():
    assert _lib.lib.wccl_opts_default().size == ctypes.sizeof(_lib.Opts)
    opts = _lib.lib.wccl_opts_default()
    assert (opts.wire, opts.algo, opts.compress, opts.cuda_stream, opts.timeout_ms, opts.max_link_rate) == (0, 0, 0, None, 0, 0)


def test_constants_are_the_librarys():
    assert wccl.MIN_LINK_RATE == _lib.lib.wccl_min_link_rate() == 125000
    assert wccl.TOPK_DEFAULT_KEEP == _lib.lib.wccl_topk_default_keep() == 8


def test_every_result_code_has_its_exception():
    names = {code: _lib.result_name(code) for code in _lib.ERROR_CLASSES}
    assert len(names) == 17, "the header's table grew: add the exception"
    for code, name in names.items():
        cls = _lib.ERROR_CLASSES[code]
        assert cls is not wccl.WcclError, f"{name} has no exception class"
        words = name[len("WCCL_ERR_"):].split("_")
        assert cls.__name__.lower().startswith("".join(words).lower()), (name, cls.__name__)
    assert issubclass(wccl.TimeoutError, TimeoutError)
    assert issubclass(wccl.InvalidArgumentError, ValueError)


def test_check_carries_the_last_error():
    with pytest.raises(wccl.InvalidArgumentError) as info:
        wccl.Coordinator(listen="127.0.0.1:0", tls=True, tls_cert="")
    assert info.value.code == 1 and info.value.name == "WCCL_ERR_INVALID_ARGUMENT"
    assert "tls_cert" in info.value.detail
    assert str(info.value).startswith("WCCL_ERR_INVALID_ARGUMENT: ") and str(info.value).count("WCCL_ERR") == 1


def test_unknown_config_key_is_named():
    with pytest.raises(wccl.InvalidArgumentError, match="no_such_key"):
        wccl.Coordinator(no_such_key=1)


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


def test_wccl_library_names_the_library():
    r = run_python("import wccl", WCCL_LIBRARY="/nonexistent/libwccl.so.0")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "/nonexistent/libwccl.so.0" in r.stderr and "WCCL_LIBRARY" in r.stderr


def test_another_major_version_is_refused(tmp_path):
    package = Path(wccl.__file__).parent
    copy = tmp_path / "wccl"
    shutil.copytree(package, copy)
    build = (copy / "_build.py").read_text()
    (copy / "_build.py").write_text(build.replace(f'VERSION = "{wccl.version()}"', 'VERSION = "99.0.0"'))
    r = run_python("import wccl", PYTHONPATH=str(tmp_path))
    assert r.returncode != 0
    assert "major version 99" in r.stderr and wccl.version() in r.stderr


def test_config_keys_are_listed():
    keys = {k[0]: k for k in wccl.config_keys()}
    assert {"coordinator", "tls", "streams", "op_timeout_ms"} <= set(keys)
    assert keys["tls"][1] == "on"
