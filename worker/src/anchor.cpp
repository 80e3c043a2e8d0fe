int tessera_worker_anchor = 0;
