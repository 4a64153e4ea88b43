"""What every command's run shares, below the rooms that train, fine-tune, evaluate, serve and publish (they and
`vaswani.cli` import it; it imports none of them), one module per job:

    errors          why a run stopped, when the user can act on it (`vaswani.cli` prints it in one line)
    ownership       one run per output folder (a lock), workers that die with their launcher
    manifests       what a command wrote in a folder and the proof of it (the manifest), before anything there is
                    replaced or deleted; a swap of two folders in one step
    preemption      SIGTERM / SIGUSR1: finish the update, checkpoint, exit with status 75 (resumable)
    launch_status   the exit status of a run under a launcher, as its processes ended ("resumable" included), and
                    whether the processes it started train together
    records         the files a run leaves beside its model that other commands read: its options, its results
"""
