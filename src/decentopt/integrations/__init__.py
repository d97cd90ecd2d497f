"""Where users already watch their runs and train their models.

* :mod:`.loggers`: what the recorder writes (each row's metrics per recorded step, the
  run's specification as hyper-parameters, the report's figures) sent to TensorBoard,
  Weights & Biases, MLflow or JSON lines, or to a logger of the users' own (the
  entry-point group ``decentopt.loggers``);
* :mod:`.monitor`: under torch.distributed, rank 0 logs the agents' mean and every rank's
  own scalars every ``log_every`` steps, with a progress line;
* :mod:`.lightning`: a Lightning strategy with one agent per process.

Each backend is an optional extra (``pip install decentopt[tensorboard]``, ``[wandb]``,
``[mlflow]``, ``[lightning]``): nothing here imports one until it is asked for.
"""
