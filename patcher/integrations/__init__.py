"""tracezoo inside the tools that run the chain: each module adapts one tool (``llmcompressor``).

A tool module is imported only when asked for, so the tool is never a dependency of tracezoo.
"""
