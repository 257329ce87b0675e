"""Traced estimates: run a real ``nn.Module`` on fake tensors and account every storage.

Needs torch (the ``trace`` extra; ``transformers`` too for Hugging Face configs).
The core (:mod:`gpuplan.core.trace`) turns the recorded log into the result; this
package only records it. See docs/trace.md for the method and its limits.
"""
