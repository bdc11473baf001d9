"""``memrl view``: a browsable page of a training run or an eval folder (see :mod:`memrl.view.loader`)."""
