"""The ChatModel seam over the Anthropic SDK and the recording of the usage each call
reports.
"""
