"""Built-in scheduler plugins, one module per plugin (installed as ``gpusched.plugins``)."""
