"""The 0.8-era import path of the scheduler and runner (`from tinygrad.realize import create_schedule`)."""
from tinygrad.engine.realize import lower_schedule, lower_schedule_item, run_schedule
from tinygrad.engine.schedule import create_schedule, create_schedule_with_vars

__all__ = ["create_schedule", "create_schedule_with_vars", "run_schedule", "lower_schedule", "lower_schedule_item"]
