"""The back end: lowering to buffers and strided views, static memory planning, and C
emission from the Jinja2 templates."""
