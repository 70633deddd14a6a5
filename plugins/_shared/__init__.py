"""Code more than one built-in plugin runs. It is no plugin: no entry point loads it and it registers nothing, and
no plugin imports another plugin's modules, only its own and these. An error in it is blamed on the plugin that
runs it, and a plugin's code digest (``provenance.code``) covers every module of it that the plugin imports."""
