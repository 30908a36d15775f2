"""genimage: Image, video and audio-spectrogram generation on gencore's flow-matching math."""

__version__ = "0.1.0"
