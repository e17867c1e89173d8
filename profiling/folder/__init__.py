"""The job folder on the shared filesystem: its layout, every file's name (:mod:`.layout`),
trace files (:mod:`.traces`), the manifest (:mod:`.manifest`), live-capture requests
(:mod:`.requests`) and whether every node sees the folder (:mod:`.shared`)."""
