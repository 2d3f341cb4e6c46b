"""The C decoder of trace events is optional: without a compiler profscope installs and runs in pure Python."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profscope.ingest._native_events",
            sources=["server/profscope/ingest/_native_events.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
