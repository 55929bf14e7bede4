"""The LLM server's counters, in Prometheus's text exposition format (what `GET /metrics` answers).

Requests by endpoint and status, prompt and completion tokens, a histogram of the time to first token (from a
request's arrival at the engine to its first sampled token), and two gauges read when scraped: requests waiting for a
slot (the queue) and requests holding one (prefilling or decoding). Counters only grow; a scraper takes rates.
"""
from __future__ import annotations

import threading
from typing import Callable

# upper bounds (seconds) of the time-to-first-token buckets: a short prompt on a GPU to a long one on a CPU
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Thread-safe counters the request threads add to; `gauges` names the values read at each scrape."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]] | None = None):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.prompt_tokens = self.completion_tokens = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)   # the last: past every bound (+Inf)
        self.ttft_sum, self.ttft_n = 0.0, 0
        self.gauges = gauges or {}

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] = self.requests.get((endpoint, status), 0) + 1

    def tokens(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def ttft(self, seconds: float) -> None:
        with self._lock:
            k = next((i for i, b in enumerate(TTFT_BUCKETS) if seconds <= b), len(TTFT_BUCKETS))
            self.ttft_counts[k] += 1
            self.ttft_sum += seconds
            self.ttft_n += 1

    def render(self) -> str:
        """The exposition text: a HELP and a TYPE line before each metric's samples."""
        with self._lock:
            out = ["# HELP llm_requests_total Requests answered, by endpoint and HTTP status.",
                   "# TYPE llm_requests_total counter"]
            for (endpoint, status), n in sorted(self.requests.items()):
                out.append(f'llm_requests_total{{endpoint="{_label(endpoint)}",status="{status}"}} {n}')
            for name, what, value in (("prompt", "Prompt tokens", self.prompt_tokens),
                                      ("completion", "Tokens generated", self.completion_tokens)):
                out += [f"# HELP llm_{name}_tokens_total {what} of the answered requests.",
                        f"# TYPE llm_{name}_tokens_total counter", f"llm_{name}_tokens_total {value}"]
            out += ["# HELP llm_time_to_first_token_seconds From a request's arrival at the engine to its first "
                    "token.", "# TYPE llm_time_to_first_token_seconds histogram"]
            total = 0
            for bound, n in zip([*(f"{b:g}" for b in TTFT_BUCKETS), "+Inf"], self.ttft_counts):
                total += n
                out.append(f'llm_time_to_first_token_seconds_bucket{{le="{bound}"}} {total}')
            out += [f"llm_time_to_first_token_seconds_sum {self.ttft_sum:.6f}",
                    f"llm_time_to_first_token_seconds_count {self.ttft_n}"]
        for name, (what, read) in self.gauges.items():
            out += [f"# HELP {name} {what}", f"# TYPE {name} gauge", f"{name} {read():g}"]
        return "\n".join(out) + "\n"


def _label(value: str) -> str:
    """A label value escaped as the format asks (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
