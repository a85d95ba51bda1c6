"""The process layer below engines/ and cell/: the one way a server is run, from its port to its
teardown (`serve`), starting, watching and stopping its process (`server`), ports (`ports`), the
key a server requires (`auth`), what an earlier run left running (`leftovers`), and sampling the
memory (`memory`, with a process tree's resident memory split in `rss`) and CPU (`machine_use`) of
process trees."""
