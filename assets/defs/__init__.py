"""The asset modules, one per group (wiki, collections, retrieval, evaluation, php, model1, ghrm, cet,
baselines, model_report), with their checks, jobs, schedules, sensors and executors. They import
`assets.lib` only; `assets.definitions` gathers them into the one Definitions object."""
