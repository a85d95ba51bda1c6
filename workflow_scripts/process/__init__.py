"""The process layer below engines/ and cell/: the one way a server is run, from its port to its
teardown (`serve`), starting, watching and stopping its process (`server`), ports (`ports`), the
key a server requires (`auth`), and sampling the memory (`memory`) and CPU (`machine_use`) of
process trees."""
